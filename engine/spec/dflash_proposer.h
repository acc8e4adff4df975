// DFlashProposer: drafts k tokens per step with a DFlashDrafter (method "dflash") in one forward.
//
// Per request it keeps the drafter's paged KV (DraftingProposer): positions [0, computed) hold
// the context K/V made from the target's states there. Those states are consumed where the target
// forward left them: observe() only notes which capture rows belong to which request, and the
// rows become context K/V, for all requests in one batched pass, before the next target forward
// overwrites them or at the start of propose(), whichever comes first. So no target state is ever
// copied to the host or kept past its step.
//
// propose() then runs one query block per request, [newest token, mask x k] at the positions after
// its context; the block's KV lands past `computed` and is overwritten by the next context. The
// block has k masks even when fewer drafts are wanted (as in vLLM: with non-causal attention every
// row depends on the block's length), except near max_model_len.
// Drafts are the argmax of each block row (greedy), or drawn from the row's distribution
// (probabilistic drafting: the rows do not depend on each other's draws, which the rejection
// sampler does not need).
//
// A request whose states did not all arrive (its KV pool ran out, or a hand-off without context)
// gets no drafts until its target state is recomputed (reset_request); output never depends on it.
//
// Hand-off: the prefill engine's drafter holds the context of every prompt position after its
// propose(); the decode engine receives that KV and nothing else.
//
// Prefix caching: context KV at p depends on tokens [0, p] only (key lead 0, like the target's),
// so full blocks before `computed` go to the pool's prefix cache and a prompt adopts the blocks its
// target hit covers.
#pragma once

#include <memory>
#include <vector>

#include "engine/spec/dflash_drafter.h"
#include "engine/spec/drafting_proposer.h"

namespace baton {

class DFlashProposer final : public DraftingProposer, public TargetStateConsumer {
 public:
  static absl::StatusOr<std::unique_ptr<DFlashProposer>> create(const SpeculativeConfig& config,
                                                                const ProposerContext& context);

  std::string_view name() const override { return "dflash"; }
  absl::Status propose(std::span<ProposalRequest> batch) override;

  TargetStateSpec target_states() const override { return drafter_->target_states(); }
  absl::Status observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                       std::int32_t n_valid) override;
  void before_target_forward() override;
  bool enable_prefix_cache() override {
    prefix_cache_ = true;
    return true;
  }
  std::int32_t adopt_cached_prefix(RequestKey key, std::span<const std::int32_t> tokens, std::uint64_t salt,
                                   std::int32_t positions) override;
  void release_cached_prefix(RequestKey key) override { reset_request(key); }
  void reset_request(RequestKey key) override;

  std::int32_t handoff_kv_positions(std::int32_t prompt_len) const override { return prompt_len; }
  absl::StatusOr<ProposerHandoff> export_state(RequestKey key) const override;
  absl::Status import_state(RequestKey key, const ProposerHandoff& state, std::span<const std::int32_t> tokens) override;
  std::optional<KvPoolFingerprint> kv_fingerprint() const override;

  const DFlashDrafter& drafter() const { return *drafter_; }

 private:
  struct DFlashState : State {
    using State::State;
    bool broken = false;        // a state went missing: no drafts until reset
  };
  // Rows of the live capture tensors waiting to become context K/V.
  struct Pending {
    RequestKey key = 0;
    std::int32_t start = 0, count = 0;
    std::int64_t row = 0;
  };

  DFlashProposer() = default;
  std::unique_ptr<State> new_state() const override { return std::make_unique<DFlashState>(block_size_); }
  static DFlashState& dflash_state(State& s) { return static_cast<DFlashState&>(s); }

  // Writes every pending row's context K/V (batched, in forwards of at most the token budget).
  absl::Status flush_context();
  // The drafts of `work`'s requests from one block forward.
  absl::Status draft_blocks(std::vector<Work>& work);
  void cache_final_blocks(std::span<const Work> work);
  // Tokens of the query block of a request with context `s` that wants `drafts` drafts.
  std::int32_t block_tokens(const State& s, std::int32_t drafts) const;
  TensorView upload_index(std::span<const std::int32_t> index);

  bool prefix_cache_ = false;
  std::int32_t max_model_len_ = 0;
  std::unique_ptr<DFlashDrafter> drafter_;
  std::vector<Pending> pending_;
  std::vector<TensorView> live_tensors_;  // the capture tensors pending_ rows are in
  std::uint64_t live_forward_ = 0;
  std::vector<std::int32_t> zeros_;         // context "tokens" (their ids are not read)
  std::vector<std::int32_t> block_tokens_;  // the query blocks, k + 1 per request
  std::vector<std::int32_t> draft_rows_;    // 1..k: a block's logits indices
  std::vector<std::int32_t> index_;
  DeviceBuffer gather_index_;
  std::int64_t index_capacity_ = 0;
  std::vector<float> logits_, row_;
};

}  // namespace baton
