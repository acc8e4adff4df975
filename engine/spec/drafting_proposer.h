// DraftingProposer: what the model-based proposers (a draft model; EAGLE-1/3 and MTP heads) share.
//   - Their own paged KV: one KvCache and KvBlockPool, sized from the target's budget plus room
//     for every sequence's drafts, so it does not run out before the target's pool does.
//   - Per-request state: a block table and how many leading positions hold final KV; dropped on
//     remove_request, reset when the target recomputes the request (preemption).
//   - The pick of a draft token from a row of logits (DraftPicker, draft_picker.h).
//   - Catch-up: running chunks of final positions through the network in forwards of at most the
//     token budget and max_num_seqs sequences, the last chunk of each request yielding its first
//     draft.
//   - Prefill/decode hand-off of the pool's KV (reserve, export, import of block ids).
// Subclasses say what a position's input is, run their network, and run the draft steps.
//
// It never touches the target's KV. If its own pool runs out anyway, the request gets no drafts
// that step (greedy output is unaffected; counted in kv_exhausted()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/forward_batch.h"
#include "engine/spec/draft_picker.h"
#include "engine/spec/proposer.h"
#include "engine/spec/proposer_factory.h"

namespace baton {

class DraftingProposer : public Proposer {
 public:
  bool has_draft_probs() const override { return probabilistic_; }
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void remove_request(RequestKey key, bool finished) override;
  void reset_request(RequestKey key) override;

  absl::StatusOr<std::vector<BlockId>> reserve_state(RequestKey key, std::int32_t prompt_len) override;
  KvCache* kv_cache() override { return cache_.get(); }
  const KvBlockPool* kv_pool() const override { return pool_.get(); }

  // Times a request got no drafts because this proposer's KV pool was full.
  std::int64_t kv_exhausted() const { return kv_exhausted_; }

 protected:
  struct State {
    explicit State(std::int32_t block_size) : table(block_size) {}
    virtual ~State() = default;
    BlockTable table;
    std::int32_t computed = 0;  // positions [0, computed) hold KV of final inputs
    bool caches = false;        // its final blocks go to the prefix cache (admitted with it on)
  };

  // One request's part of a propose() call.
  struct Work {
    ProposalRequest* p = nullptr;
    State* s = nullptr;
    bool ok = true;  // false: no (more) drafts for it this call
  };

  // One request's positions to catch up on: [start, start + tokens.size()), one input token each.
  struct CatchUp {
    Work* work = nullptr;
    std::int32_t start = 0;
    std::span<const std::int32_t> tokens;
  };
  // What one forward runs of items[item]: its positions [start + offset, start + offset + count).
  struct CatchUpSlice {
    std::size_t item = 0;
    std::int32_t offset = 0, count = 0;
  };

  // Runs one forward over `batch`, whose sequence j is slices[j] (the network's other inputs,
  // such as features, come from there). owners: for each sequence that asks for logits (in
  // order), its request.
  using CatchUpForward = std::function<absl::Status(const ForwardBatch& batch, std::span<const CatchUpSlice> slices,
                                                    std::span<Work* const> owners)>;

  DraftingProposer() = default;
  virtual std::unique_ptr<State> new_state() const;
  // The pool's KvBlockPool::key_lead: how many tokens past a position its KV depends on.
  virtual std::int32_t key_lead() const { return 0; }

  // Creates the pool for `layout` with the target's budget's worth of blocks plus k + 1 positions
  // per sequence.
  absl::Status init_kv(Backend& backend, const KvCacheLayout& layout, const ProposerContext& ctx, std::int32_t k);
  // The draft picker (and probabilistic_, vocab_ from it), its argmax_on_device() taking up to
  // max_rows rows (0: max_num_seqs). Before init_kv().
  absl::Status init_sampling(const SpeculativeConfig& config, const ProposerContext& ctx, std::int32_t max_rows = 0);

  State* state_of(RequestKey key);
  const State* state_of(RequestKey key) const;
  // Grows the request's table to hold `positions`; false (and counted) when the pool is full.
  bool reserve_positions(Work& w, std::int32_t positions);

  // Runs every catch-up through `forward` in batches limited by the token budget and max_num_seqs
  // (long ones in chunks); advances each state's `computed`; the chunk that ends a catch-up asks
  // for logits at its last position.
  absl::Status run_catch_ups(std::span<CatchUp> items, const CatchUpForward& forward);

  // DraftPicker::pick and argmax_on_device (rows <= init_sampling()'s max_rows).
  std::int32_t pick(std::span<const float> target_logits, ProposalRequest& p) { return picker_.pick(target_logits, p); }
  std::span<const std::int32_t> argmax_on_device(const TensorView& logits) { return picker_.argmax_on_device(logits); }

  // Prefix caching, for a request being admitted: resets its state (it holds no KV yet), gives it
  // the longest run of the first positions / block_size blocks of `tokens` the pool's prefix
  // cache holds under `salt`, marks it as caching, and returns its state (nullptr when the request
  // is unknown). Its `computed` is the positions those blocks cover.
  State* adopt_cached_blocks(RequestKey key, std::span<const std::int32_t> tokens, std::uint64_t salt,
                             std::int32_t positions);

  // The table's blocks covering positions [0, positions).
  static std::vector<BlockId> blocks_for_positions(const State& s, std::int32_t positions);
  // Decode side: takes over the reserved blocks for [0, positions) (the transport filled them).
  absl::Status adopt_handoff_kv(RequestKey key, const ProposerHandoff& h, State** state);

  Backend* backend_ = nullptr;  // init_kv()'s
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvBlockPool> pool_;
  std::unordered_map<RequestKey, std::unique_ptr<State>> states_;
  std::int32_t k_ = 0, budget_ = 0, max_seqs_ = 0, block_size_ = 16, vocab_ = 0;
  bool probabilistic_ = false;
  std::int64_t kv_exhausted_ = 0;

 private:
  DraftPicker picker_;
};

}  // namespace baton
