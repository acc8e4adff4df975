// BatchPlan: the per-forward metadata of a varlen batch — token ids, positions, each token's
// sequence and KV slot, padded block tables, the rows that want logits — validated on the host and
// uploaded to the device once per forward, as one copy of one packed buffer (a copy to a GPU costs
// microseconds whatever its size), from page-locked staging memory on a GPU, which the host does
// not wait for. Shared by the Transformer and the draft heads.
//
// It validates everything a batch claims (limits, block tables long enough, token ids in the
// vocabulary, logits indices inside their chunk) so kernels never see an out-of-range index.
//
// For a forward replayed from a graph (engine/model/forward_graphs.h) it pads the batch to the
// graph's shape — sequences up to its number, each sequence's new tokens up to its length — and
// gives attention the bound max_model_len as its longest context, so that the packed layout and
// every launch value are the graph's whatever the real batch. The real tokens and logits rows come
// first, in the batch's order, so a caller reads them where it would without padding.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/forward_batch.h"
#include "kernels/backend.h"

namespace baton {

struct BatchLimits {
  std::int32_t max_num_tokens = 0;
  std::int32_t max_num_seqs = 0;
  std::int32_t max_num_logits = 0;
  std::int32_t max_model_len = 0;
  std::int32_t block_size = 16;
  std::int32_t vocab_size = 0;  // token ids must be below it
};

// The recurrent-state cache a batch's sequences name (StateCache's groups and slots); all zero for
// a model without linear-attention layers, whose sequences' state fields are then ignored.
struct RecurrentLimits {
  std::int32_t groups = 0;
  std::int32_t slots = 0;
};

// The shape of a padded forward (a graph's): num_seqs sequences of tokens_per_seq new tokens each,
// with logits at none of them (logits_per_seq 0), the last (1) or every one (tokens_per_seq).
struct GraphShape {
  std::int64_t num_seqs = 0;
  std::int32_t tokens_per_seq = 0;
  std::int32_t logits_per_seq = 0;
  bool operator==(const GraphShape&) const = default;
};

// Whether `batch` pads to `shape`: at most shape.num_seqs sequences, each with 1 to tokens_per_seq
// new tokens and logits at none of them, its last, or every one, as the shape says (a one-token
// sequence with logits fits either of the last two).
bool fits_shape(const ForwardBatch& batch, const GraphShape& shape);

class BatchPlan {
 public:
  absl::Status allocate(Backend& backend, const BatchLimits& limits);
  // Validates `batch` against the limits and a cache of num_blocks blocks, then uploads it.
  // With a `padded` shape (which the batch must fit), the batch is padded to it:
  //  - each real sequence shorter than tokens_per_seq gets filler tokens (token 0 at position 0 of
  //    the sequence, so attention reads one of its keys; KV writes skipped; logits rows when the
  //    shape has logits at every token), placed after every real token;
  //  - sequences up to num_seqs, each at positions 0.. over block 0 with its KV writes skipped.
  // Their rows are computed and never read: kernels are batch-invariant, so no real row changes.
  //  - padding sequences keep no recurrent state (group -1); fillers are outside every sequence's
  //    recurrent rows.
  // With `recurrent` limits, each sequence's state group and slot are checked against them (groups
  // distinct within the batch, the zero state exactly at position 0).
  absl::Status plan(const ForwardBatch& batch, std::int32_t num_blocks,
                    const std::optional<GraphShape>& padded = std::nullopt, const RecurrentLimits& recurrent = {});

  // Counts include padding.
  std::int64_t num_tokens() const { return static_cast<std::int64_t>(h_tokens_.size()); }
  std::int64_t num_logits() const { return static_cast<std::int64_t>(h_logits_rows_.size()); }
  std::int64_t num_seqs() const { return num_seqs_; }
  const std::vector<std::int32_t>& host_positions() const { return h_positions_; }
  const std::vector<std::int32_t>& host_logits_rows() const { return h_logits_rows_; }

  TensorView tokens() const { return region(Region::kTokens, {num_tokens()}); }
  TensorView positions() const { return region(Region::kPositions, {num_tokens()}); }
  TensorView slots() const { return region(Region::kSlots, {num_tokens()}); }
  TensorView logits_rows() const { return region(Region::kLogitsRows, {num_logits()}); }
  AttentionBatch attention() const;
  RecurrentBatch recurrent() const;

 private:
  // The packed device buffer holds these arrays back to back, in this order.
  enum class Region { kTokens, kPositions, kTokenSeq, kSlots, kLogitsRows, kBlockTables, kRecurrent, kCount };
  TensorView region(Region r, std::initializer_list<std::int64_t> shape) const;

  Backend* backend_ = nullptr;
  BatchLimits limits_;
  std::int32_t max_blocks_per_seq_ = 0;
  std::vector<std::int32_t> h_tokens_, h_positions_, h_token_seq_, h_slots_, h_block_tables_, h_logits_rows_;
  std::vector<std::int32_t> h_recurrent_;  // [num_seqs, 4]: RecurrentBatch::seqs
  std::int32_t state_slots_ = 0;
  std::int64_t num_seqs_ = 0, max_context_len_ = 0;
  std::int64_t offsets_[static_cast<int>(Region::kCount)] = {};  // in int32 elements
  DeviceBuffer device_;
  // The packed arrays on the host, in staging memory (Backend::allocate_staging), two slots used
  // in turn so that packing the next forward's never waits for the last upload.
  std::array<DeviceBuffer, 2> staging_;
  std::array<std::uint64_t, 2> staging_fence_{};
  std::size_t next_slot_ = 0;
};

}  // namespace baton
