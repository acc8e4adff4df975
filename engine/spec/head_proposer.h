// HeadProposer: drafts with a DraftHead (EAGLE-1, EAGLE-3, MTP) from the target's hidden states.
//
// Per request it keeps the head's KV (one block table for all of the head's modules;
// DraftingProposer) and the target features it has been handed and not yet consumed. propose()
// first catches the head up on every position whose target state and following token are final
// (every module learns them), which yields the first draft, then drafts autoregressively from the
// head's own outputs; step j runs module j mod L. A module attends over every position up to the
// one it runs at: positions another module drafted at are computed by this module too (from the
// same token and feature) before it runs, so no module ever reads a KV slot it did not write. Head
// KV written while drafting is discarded at the next call (those positions are recomputed from
// real target states).
//
// Where the features live: the target's states arrive in the target forward's capture buffers on
// the backend (observe()), and a catch-up in the same step reads them there; only the rows still
// needed when the next target forward comes (before_target_forward(): a prompt chunk that is not
// the last, the row of the last computed position) are copied to the host, and go back up when
// used. The head's own outputs, fed back while drafting, never leave the backend.
//
// Hand-off: a prefill engine's head has consumed the prompt's states; a decode engine receives the
// head KV of positions [0, prompt_len - 1) and the target features of the last prompt position
// (EAGLE-1/MTP: the final hidden state; EAGLE-3: its three aux layers' states).
//
// Prefix caching: the head's KV of a prompt's full blocks goes to its own pool's prefix cache,
// keyed like the target's but one token further (position p consumed token p + 1; key lead 1), and
// only once no later call rewrites it (blocks wholly before the last computed position, which a
// call recomputes when nothing new arrived). An admitted prompt takes the head blocks its target
// hit covers, and the target reuses no more than the head holds, so the head always starts where
// the target's states do.
#pragma once

#include <memory>
#include <vector>

#include "engine/spec/draft_head.h"
#include "engine/spec/drafting_proposer.h"

namespace baton {

class HeadProposer final : public DraftingProposer, public TargetStateConsumer {
 public:
  static absl::StatusOr<std::unique_ptr<HeadProposer>> create(const SpeculativeConfig& config,
                                                              const ProposerContext& context);

  std::string_view name() const override { return name_; }
  absl::Status propose(std::span<ProposalRequest> batch) override;

  TargetStateSpec target_states() const override { return head_->target_states(); }
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

  std::int32_t handoff_kv_positions(std::int32_t prompt_len) const override { return std::max(0, prompt_len - 1); }
  absl::StatusOr<ProposerHandoff> export_state(RequestKey key) const override;
  absl::Status import_state(RequestKey key, const ProposerHandoff& state, std::span<const std::int32_t> tokens) override;

  std::optional<std::int32_t> default_num_speculative_tokens() const override;
  std::optional<KvPoolFingerprint> kv_fingerprint() const override;

  const DraftHead& head() const { return *head_; }

 private:
  struct HeadState : State {
    using State::State;
    // Target features of positions [rows_start, rows_start + rows / width) on the host, then of
    // the next live_count positions in the capture tensors (live_tensors_) from row live_row.
    // After a catch-up the row of the last computed position stays, to recompute it when nothing
    // new has arrived. Invariant: rows_start <= computed.
    std::int32_t rows_start = 0;
    std::vector<float> rows;
    std::int32_t live_count = 0;
    std::int64_t live_row = 0;
  };
  struct Drafting;

  HeadProposer() = default;
  std::unique_ptr<State> new_state() const override { return std::make_unique<HeadState>(block_size_); }
  std::int32_t key_lead() const override { return 1; }

  static HeadState& head_state(State& s) { return static_cast<HeadState&>(s); }
  std::int32_t host_end(const HeadState& s) const {
    return s.rows_start + static_cast<std::int32_t>(s.rows.size() / static_cast<std::size_t>(width_));
  }
  std::int32_t rows_end(const HeadState& s) const { return host_end(s) + s.live_count; }
  // Drops the features of positions before `from` (host rows and live rows alike).
  void drop_rows_before(HeadState& s, std::int32_t from) const;
  // Appends s's live rows, side by side per position, to `out` (host).
  void read_live(const HeadState& s, std::vector<float>& out) const;
  // Moves s's live rows to its host rows.
  void keep_live_on_host(HeadState& s);
  // Fills `features` ([batch tokens, width_]) with the target features of a catch-up forward.
  void fill_target_features(std::span<const CatchUpSlice> slices, std::span<const CatchUp> items,
                            const TensorView& features);
  // Copies a forward's fed-back outputs ([n, hidden]) to drafted_; returns the first row.
  std::int32_t keep_outputs(const HeadOutput& out);
  // Fills `features` ([rows.size(), hidden]) with drafted_ rows `rows`.
  void gather_drafted(std::span<const std::int32_t> rows, const TensorView& features);
  // Uploads `index` to gather_index_ and returns it as a device tensor.
  TensorView upload_index(std::span<const std::int32_t> index);
  // Probabilistic drafting: q over the target vocabulary from a row of the head's logits.
  std::int32_t pick_head(std::span<const float> head_logits, ProposalRequest& p);
  // Greedy drafting: the argmax of each row of a head forward, picked on the backend (empty when
  // probabilistic).
  std::span<const std::int32_t> greedy_ids(const HeadOutput& out);
  // The draft (a target id) from row i of a head forward, or -1 when the row has none.
  std::int32_t draft_from(const HeadOutput& out, std::span<const std::int32_t> greedy_ids, std::size_t i,
                          ProposalRequest& p);
  absl::Status catch_up(std::vector<Drafting>& work);
  absl::Status draft_steps(std::vector<Drafting>& work);
  // Registers the final blocks of each request's head KV in the prefix cache (see the header).
  void cache_final_blocks(const std::vector<Drafting>& work);

  std::string name_;
  SpecMethod method_ = SpecMethod::kEagle;
  bool prefix_cache_ = false;  // enable_prefix_cache()'s
  std::unique_ptr<DraftHead> head_;
  std::int32_t width_ = 0;
  std::size_t num_states_ = 0;  // captured tensors per target forward (EAGLE-3: 3; else 1)
  std::vector<float> row_;
  // The target forward whose capture tensors hold the live rows, and the states that have some.
  std::vector<TensorView> live_tensors_;
  std::uint64_t live_forward_ = 0;
  std::vector<RequestKey> live_keys_;
  std::vector<HeadState*> kept_;         // before_target_forward()'s
  DeviceBuffer drafted_;                 // [k * max_num_seqs, hidden]: one propose() call's outputs
  std::int32_t drafted_rows_ = 0;        // rows of drafted_ in use
  DeviceBuffer gather_index_;            // [index_capacity_] I32
  std::int64_t index_capacity_ = 0;
  std::vector<std::int32_t> index_;      // host side of a gather's rows
  std::vector<float> staging_;           // host rows on their way up or down
};

}  // namespace baton
