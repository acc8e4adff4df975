// The P/D rule (docs/architecture.md, "Speculative configuration and the P/D rule")
// over plain values, so that the engine (a node checking its own configuration at start-up) and
// the router (pairing a prefill node with a decode node from their NodeInfo) apply one rule with
// one wording.
//
//   P runs num_speculative_tokens = 1, D runs num_speculative_tokens >= 1; for hybrid models with
//   recurrent layers P and D run the same k (the recurrent-state cache holds 1 + k slots per
//   request and the handed-over state is located by k).
//
// A method name is the `method` key of speculative_config ("ngram", "suffix", "draft_model",
// "eagle", "eagle3", "mtp", "medusa", "dflash", "extract_hidden_states"); "" means the node does not
// speculate. Every error names the values, the model kind and the rule.
//
// Must not: parse speculative_config JSON or depend on anything above common/ (the router links
// this without the engine).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace baton {

enum class PdRole { kPrefill, kDecode };

// A node's speculation as it reports it.
struct SpeculationSetting {
  std::string method;                        // "" without speculation
  std::int32_t num_speculative_tokens = 0;   // k; 0 without speculation
  bool enabled() const { return !method.empty(); }
};

// The model, as far as the rule cares.
struct PdModel {
  std::string kind;              // architecture, e.g. "LlamaForCausalLM"; may be empty
  bool has_recurrent_layers = false;
};

// "an attention-only model (LlamaForCausalLM)" / "a hybrid model with recurrent layers (...)".
std::string describe_model(const PdModel& model);

// Methods whose proposer needs no state from prefill (they draft from the token history alone), so
// a decode node may run them behind a prefill node that does not speculate.
bool is_model_free_method(std::string_view method);

// The rule for one node's own configuration (k resolved). INVALID_ARGUMENT (a configuration error,
// phrased about the speculative_config key) when it breaks the rule; OK without speculation.
absl::Status check_pd_rule_for_node(PdRole role, const SpeculationSetting& setting, const PdModel& model);

// Whether a prefill node and a decode node may be paired: FAILED_PRECONDITION naming both values,
// the model kind and the rule when not.
//   - neither speculates: OK;
//   - both speculate: same method, then the k rule above;
//   - P does not, D runs a model-free method (ngram, suffix) on an attention-only model: OK;
//   - P does not, D runs a method that needs draft-side state from prefill (draft_model, eagle,
//     eagle3, mtp, medusa, dflash), or the model has recurrent layers (k must be equal): refused;
//   - P speculates, D does not: refused (P's draft token would have no verifier).
absl::Status check_pd_pairing(const SpeculationSetting& prefill, const SpeculationSetting& decode, const PdModel& model);

}  // namespace baton
