// DraftModelProposer: speculative drafts from a second, smaller Hugging Face model with the same
// tokenizer. It keeps its own paged KV (DraftingProposer), catches up on each request's accepted
// tokens, then runs k autoregressive steps for all requests in one batch per step. Drafts are the
// draft model's argmax (greedy, one-hot), or sampled from its processed distribution with q
// recorded (draft_sample_method = probabilistic).
//
// Hand-off: a prefill engine's draft model has computed the prompt's draft KV; a decode engine
// receives it (positions [0, prompt_len)) and recomputes only the first token's.
//
// It never touches the target's KV.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/transformer.h"
#include "engine/spec/drafting_proposer.h"

namespace baton {

class DraftModelProposer final : public DraftingProposer {
 public:
  static absl::StatusOr<std::unique_ptr<DraftModelProposer>> create(const SpeculativeConfig& config,
                                                                    const ProposerContext& context);

  std::string_view name() const override { return "draft_model"; }
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void reset_request(RequestKey key) override;  // keeps the prompt length
  absl::Status propose(std::span<ProposalRequest> batch) override;

  std::optional<KvPoolFingerprint> kv_fingerprint() const override;
  std::int32_t handoff_kv_positions(std::int32_t prompt_len) const override { return prompt_len; }
  absl::StatusOr<ProposerHandoff> export_state(RequestKey key) const override;
  absl::Status import_state(RequestKey key, const ProposerHandoff& state, std::span<const std::int32_t> tokens) override;

  const Transformer& model() const { return *model_; }

 private:
  struct ModelState : State {
    using State::State;
    std::vector<std::int32_t> fed;  // the tokens at positions [0, computed)
    std::int32_t prompt_len = 0;
  };

  DraftModelProposer() = default;
  std::unique_ptr<State> new_state() const override { return std::make_unique<ModelState>(block_size_); }
  static ModelState& model_state(State& s) { return static_cast<ModelState&>(s); }
  // Rolls the draft KV back to the longest prefix of `tokens` it has computed (always leaving the
  // newest token to compute: its logits give the first draft).
  void sync(ModelState& s, std::span<const std::int32_t> tokens);
  // One forward; picks a draft for every owner (the sequences that asked for logits, in order).
  absl::Status run(const ForwardBatch& batch, std::span<Work* const> owners);

  std::unique_ptr<Transformer> model_;
  std::vector<float> host_logits_;
};

// Checks that the draft model speaks the target's vocabulary (same vocab_size and, when both have
// tokenizer.json, the same vocabulary and added tokens); the error names both directories.
absl::Status check_same_vocabulary(const std::string& target_dir, const ModelConfig& target,
                                   const std::string& draft_dir, const ModelConfig& draft);

}  // namespace baton
