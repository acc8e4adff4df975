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
// graph's number of sequences and gives attention the bound max_model_len as its longest context,
// so that the packed layout and every launch value are the graph's whatever the real batch.
#pragma once

#include <array>
#include <cstdint>
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

class BatchPlan {
 public:
  absl::Status allocate(Backend& backend, const BatchLimits& limits);
  // Validates `batch` against the limits and a cache of num_blocks blocks, then uploads it.
  // padded_seqs > 0 (a graph's shape; every sequence of `batch` has the first one's number of
  // tokens and logits positions): pads the batch with sequences shaped like its first, each at
  // positions 0.. over block 0 with its KV writes skipped, up to padded_seqs sequences.
  absl::Status plan(const ForwardBatch& batch, std::int32_t num_blocks, std::int64_t padded_seqs = 0);

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

 private:
  // The packed device buffer holds these arrays back to back, in this order.
  enum class Region { kTokens, kPositions, kTokenSeq, kSlots, kLogitsRows, kBlockTables, kCount };
  TensorView region(Region r, std::initializer_list<std::int64_t> shape) const;

  Backend* backend_ = nullptr;
  BatchLimits limits_;
  std::int32_t max_blocks_per_seq_ = 0;
  std::vector<std::int32_t> h_tokens_, h_positions_, h_token_seq_, h_slots_, h_block_tables_, h_logits_rows_;
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
