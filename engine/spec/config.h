// SpeculativeConfig: the `speculative_config` JSON, with vLLM's keys and defaults
// (docs/engine.md, "Speculative configuration"), validated for a node role under the P/D rule.
//
// Unknown keys and bad values are errors naming the key. The P/D rule: a prefill node runs with
// num_speculative_tokens = 1, a decode node with >= 1, and for models with recurrent layers both
// must be equal (checked by the router when it pairs nodes). The rule itself is common/pd_rule.h;
// validate_for_role() and pd_compatible() apply it to a parsed config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/spec/rejection_sampler.h"
#include "nlohmann/json_fwd.hpp"

namespace baton {

enum class SpecMethod { kNgram, kSuffix, kDraftModel, kEagle, kEagle3, kMtp, kMedusa, kDflash, kExtractHiddenStates };
enum class RejectionMethod { kStandard, kBlock };
enum class DraftSampleMethod { kGreedy, kProbabilistic };
enum class NodeRole { kColocated, kPrefill, kDecode };

std::string_view spec_method_name(SpecMethod m);
std::string_view node_role_name(NodeRole r);

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kNgram;
  std::string model;  // draft model / head directory (draft_model, eagle, eagle3, medusa, dflash; optional for mtp)
  std::int32_t num_speculative_tokens = 0;  // k
  // extract_hidden_states (vLLM's keys): draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids,
  // the target layers whose input residual stream is saved, in this order.
  std::vector<std::int32_t> hidden_state_layer_ids;
  // extract_hidden_states: where the files go, from --kv-transfer-config (a node's own setting, not
  // part of the JSON this config prints or pairs by).
  std::string hidden_states_dir;
  std::int32_t prompt_lookup_min = 5;
  std::int32_t prompt_lookup_max = 5;
  std::int32_t suffix_decoding_max_tree_depth = 24;
  std::int32_t suffix_decoding_max_cached_requests = 10000;
  float suffix_decoding_max_spec_factor = 1.0f;
  float suffix_decoding_min_token_prob = 0.1f;
  std::int32_t draft_tensor_parallel_size = 1;
  RejectionMethod rejection_sample_method = RejectionMethod::kStandard;
  // rejection_sampler_config.enable_entropy_verify and its two parameters (vLLM Ascend's keys,
  // rejection_sampler_config.h): LOSSY. Off by default; everything else here keeps output exact.
  EntropyVerification entropy_verification;
  DraftSampleMethod draft_sample_method = DraftSampleMethod::kGreedy;
  // vLLM's key: a decode step with at least this many requests runs without drafts (0: never).
  // Speculation spends spare compute, and a large batch has none: its verification costs nearly
  // k + 1 steps while the drafts add under one token each on average. At least 2 when set.
  std::int32_t disable_by_batch_size = 0;
  // Baton's own key (not vLLM's): each step drafts the number of tokens in [0, k] that its
  // measured costs and acceptance say gives the most tokens per second (draft_length.h), instead
  // of k every step. The output is the same either way; only speed differs. Decode and colocated
  // engines; a prefill node drafts once per request and ignores it.
  bool adaptive_draft_length = false;
  // Baton's own keys (not vLLM's): a proposer sidecar (baton-proposer, host:port) that a decode
  // node asks for its ngram/suffix drafts, and how long a step may wait for its answer before the
  // node drafts locally. Only with method ngram or suffix; prefill nodes ignore them (they run
  // k = 1 locally). The engine itself never talks to the sidecar: the decode node wraps its
  // proposer (decode_node/sidecar_proposer.h).
  std::string proposer_endpoint;
  double proposer_budget_ms = 5.0;

  // `json_text` is the object as given on a command line. `model_has_recurrent_layers` is part of
  // the P/D rule (hybrid models, e.g. Qwen3-Next).
  static absl::StatusOr<SpeculativeConfig> parse(std::string_view json_text, NodeRole role,
                                                 bool model_has_recurrent_layers = false);
  static absl::StatusOr<SpeculativeConfig> from_json(const nlohmann::json& j, NodeRole role,
                                                     bool model_has_recurrent_layers = false);
  nlohmann::json to_json() const;

  // Whether sampled output keeps the target's distribution exactly (false with entropy verification).
  bool lossless() const { return !entropy_verification.enabled; }
  // "standard", "block", "entropy" or "block+entropy": how drafts are verified.
  std::string_view verification_name() const;
};

// The P/D rule for one node (num_speculative_tokens resolved): a prefill node runs k = 1, a decode
// node k >= 1, for attention-only models; with recurrent layers both run the decode nodes' k,
// which pd_compatible() checks when nodes are paired. Colocated engines are unconstrained. The
// error names the value, the model kind and the rule.
absl::Status validate_for_role(const std::optional<SpeculativeConfig>& config, NodeRole role,
                               bool model_has_recurrent_layers);

// Whether a prefill node's and a decode node's configurations may be paired (the P/D rule).
// The error names both values, the model kind and the rule.
absl::Status pd_compatible(const SpeculativeConfig& prefill, const SpeculativeConfig& decode,
                           bool model_has_recurrent_layers);

}  // namespace baton
