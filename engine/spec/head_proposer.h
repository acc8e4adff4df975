// HeadProposer: drafts with a DraftHead (EAGLE-1, EAGLE-3, MTP) from the target's hidden states.
//
// Per request it keeps the head's KV (one block table for all of the head's modules) and the
// target states it has been handed but not consumed. propose() first catches the head up on every
// position whose target state and following token are final, which yields the first draft, then
// drafts autoregressively from the head's own outputs. Head KV written while drafting is discarded
// at the next call (those positions are recomputed from real target states).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/spec/draft_head.h"
#include "engine/spec/proposer_factory.h"

namespace baton {

class HeadProposer final : public Proposer, public TargetStateConsumer {
 public:
  static absl::StatusOr<std::unique_ptr<HeadProposer>> create(const SpeculativeConfig& config,
                                                              const ProposerContext& context);

  std::string_view name() const override { return name_; }
  bool has_draft_probs() const override { return probabilistic_; }
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void remove_request(RequestKey key, bool finished) override;
  absl::Status propose(std::span<ProposalRequest> batch) override;

  TargetStateSpec target_states() const override { return head_->target_states(); }
  void observe(RequestKey key, std::int32_t start, std::span<const float> rows, std::int32_t n,
               std::int32_t n_valid) override;

 private:
  struct State {
    explicit State(std::int32_t block_size) : table(block_size) {}
    BlockTable table;
    std::int32_t valid = 0;       // head positions [0, valid) computed from final target states
    std::vector<float> pending;   // target features of positions [valid, valid + pending rows)
    std::vector<float> last_row;  // target features of position valid - 1 (to recompute it)
  };
  struct Work;

  HeadProposer() = default;
  std::int32_t pending_rows(const State& s) const {
    return static_cast<std::int32_t>(s.pending.size() / static_cast<std::size_t>(width_));
  }
  std::int32_t pick(std::span<const float> logits, ProposalRequest& p);
  absl::Status catch_up(std::vector<Work>& work);
  absl::Status draft_steps(std::vector<Work>& work);

  std::string name_;
  std::unique_ptr<DraftHead> head_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvBlockPool> pool_;
  std::unordered_map<RequestKey, State> states_;
  std::int32_t k_ = 0, budget_ = 0, max_seqs_ = 0, block_size_ = 16, width_ = 0, vocab_ = 0;
  bool probabilistic_ = false;
  Sampler sampler_;
  std::vector<std::int32_t> eos_;
  std::vector<float> row_, probs_;
  std::vector<std::int32_t> history_;
};

}  // namespace baton
