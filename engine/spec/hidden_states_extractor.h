// HiddenStatesExtractor: the `extract_hidden_states` method (vLLM's): no drafts; it saves, for each
// request whose prompt this engine computes, the residual stream entering the target layers
// draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids at every prompt position, in one
// safetensors file per request (hidden_states_file.h) under the directory of --kv-transfer-config.
// Those are the features EAGLE-3-style heads are trained on.
//
// Rows are written to the file as the target's prompt chunks arrive (observe()); the chunk that
// completes the prompt renames the file to its final name and output_file() reports it, before the
// request's first token is returned. A prefill node writes the file of every prompt it prefills; a
// decode node those it prefills locally (a handed-over request's prompt states stay where they were
// computed). A write error fails that request alone; an aborted request's partial file is removed.
//
// It proposes nothing, so output is plain decoding's. It needs every prompt position computed, so
// it leaves prefix caching off (enable_prefix_cache() is false).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/spec/hidden_states_file.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/proposer_factory.h"

namespace baton {

class HiddenStatesExtractor final : public Proposer, public TargetStateConsumer {
 public:
  // Checks the layer ids against the target and that the directory can be written (it is created
  // if missing).
  static absl::StatusOr<std::unique_ptr<HiddenStatesExtractor>> create(const SpeculativeConfig& config,
                                                                      const ProposerContext& context);

  std::string_view name() const override { return "extract_hidden_states"; }
  std::optional<std::int32_t> default_num_speculative_tokens() const override { return 1; }

  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void label_request(RequestKey key, std::string_view request_id) override;
  void remove_request(RequestKey key, bool finished) override;
  absl::Status propose(std::span<ProposalRequest> batch) override;
  std::string output_file(RequestKey key) const override;

  TargetStateSpec target_states() const override { return TargetStateSpec{layers_, /*final_hidden=*/false}; }
  absl::Status observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                       std::int32_t n_valid) override;

  const std::string& directory() const { return dir_; }

 private:
  struct State {
    std::vector<std::int32_t> prompt;
    std::string file_name;
    std::optional<HiddenStatesFile> file;  // open from the first prompt chunk until finished
    std::int32_t written = 0;              // prompt positions [0, written) are in the file
  };

  HiddenStatesExtractor() = default;

  Backend* backend_ = nullptr;
  std::vector<std::int32_t> layers_;
  std::int32_t hidden_ = 0;
  std::string dir_;
  std::unordered_map<RequestKey, State> states_;
  std::vector<float> layer_rows_;  // [rows, hidden] of one layer, copied from the backend
  std::vector<float> file_rows_;   // [rows, layers, hidden], the file's order
};

}  // namespace baton
