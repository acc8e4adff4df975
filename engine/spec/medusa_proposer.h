// MedusaProposer: drafts with Medusa heads (medusa_head.h) from the target's final hidden states.
//
// A step's drafts all come from one state: for a request whose tokens are t_0..t_{n-1} (t_{n-1}
// sampled, not yet run through the target), draft i is head i's pick from h_{n-2}, the final
// hidden state of the position that produced t_{n-1}. So per request it keeps just that one row:
// observe() notes where the target forward left the newest final row, before_target_forward()
// copies the noted rows to the host in one gather and one copy (the forward about to run
// overwrites them), and propose() runs each head once over the batch's rows. It has no KV, so
// prefix caching stays on and nothing is recomputed after preemption beyond the target's own work.
//
// Hand-off: a prefill engine exports the last prompt position's row; a decode engine imports it as
// the state its first step drafts from.
//
// It never changes the target's states or KV. A request whose row is missing or stale (the target
// recomputed it, or its states were never observed) gets no drafts that step: the output is the
// target's either way.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/spec/draft_picker.h"
#include "engine/spec/medusa_head.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/proposer_factory.h"

namespace baton {

class MedusaProposer final : public Proposer, public TargetStateConsumer {
 public:
  static absl::StatusOr<std::unique_ptr<MedusaProposer>> create(const SpeculativeConfig& config,
                                                               const ProposerContext& context);

  std::string_view name() const override { return "medusa"; }
  bool has_draft_probs() const override { return picker_.probabilistic(); }
  std::optional<std::int32_t> default_num_speculative_tokens() const override { return head_->num_heads(); }

  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void remove_request(RequestKey key, bool finished) override;
  void reset_request(RequestKey key) override;
  absl::Status propose(std::span<ProposalRequest> batch) override;

  TargetStateSpec target_states() const override { return TargetStateSpec{{}, /*final_hidden=*/true}; }
  absl::Status observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                       std::int32_t n_valid) override;
  void before_target_forward() override;
  // No KV of its own: whatever prefix the target reuses, the state it drafts from is the row of the
  // newest position, which the target computes anyway.
  bool enable_prefix_cache() override { return true; }
  std::int32_t adopt_cached_prefix(RequestKey /*key*/, std::span<const std::int32_t> /*tokens*/,
                                   std::uint64_t /*salt*/, std::int32_t positions) override {
    return positions;
  }

  absl::StatusOr<ProposerHandoff> export_state(RequestKey key) const override;
  absl::Status import_state(RequestKey key, const ProposerHandoff& state, std::span<const std::int32_t> tokens) override;

  const MedusaHead& head() const { return *head_; }

 private:
  struct State {
    std::int32_t position = -1;  // whose final hidden state `row` / live_row holds; -1: none
    bool live = false;           // in the current target forward's capture tensor, at live_row
    std::int64_t live_row = 0;
    std::vector<float> row;      // [hidden] on the host, when !live
  };
  // One request's part of a propose() call: its row in the head's input, its draft budget.
  struct Item {
    ProposalRequest* p = nullptr;
    State* s = nullptr;
    std::int32_t drafts = 0;
    bool stopped = false;
  };

  MedusaProposer() = default;
  // Fills the head's input rows in `items` order (live rows gathered on the backend, host rows
  // uploaded).
  void fill_features(const std::vector<Item>& items);
  // The draft from row i of a head's logits ([rows, out_vocab] on the backend); -1 for none.
  std::int32_t draft_from(const TensorView& logits, std::span<const std::int32_t> greedy_ids, std::size_t i,
                          ProposalRequest& p);

  std::unique_ptr<MedusaHead> head_;
  DraftPicker picker_;
  Backend* backend_ = nullptr;
  std::int32_t k_ = 0;
  std::unordered_map<RequestKey, State> states_;
  TensorView live_tensor_;              // the capture tensor live rows are in
  std::uint64_t live_forward_ = 0;      // the target forward that wrote it
  std::vector<RequestKey> live_keys_;   // states with live rows
  DeviceBuffer gather_index_;           // [max_num_seqs] I32
  std::vector<std::int32_t> index_;
  std::vector<float> staging_;          // host rows on their way up or down
  std::vector<float> logits_host_;      // probabilistic drafting: one head's logits rows
  std::vector<float> target_row_;       // ... one of them over the target vocabulary
};

}  // namespace baton
