// StepBatch: one engine step's forward, from the scheduler's chunks to per-chunk host rows.
//   build()        turns the chunks into a ForwardBatch: each chunk's token span (for a
//                  verification, the pending token followed by the drafts), the positions that
//                  want logits, and the hidden states the proposer wants captured;
//   fetch()        gives each chunk that the host samples its logits [rows, vocab] (read in place
//                  where the host can read device memory, else copied, only those chunks' rows)
//                  and points each chunk at its rows of the captured states, which stay on the
//                  backend (TargetStateConsumer::observe() reads them there);
//   pick_on_device()  picks the tokens of the chunks the engine flagged where the logits are:
//                  argmax_rows() when every row of the forward is a greedy device row, else
//                  sample_rows(), which skips the host's rows (row j of a chunk draws at its
//                  position + j); only their ids reach the host (DevicePicks).
// Buffers are reused from step to step and sized once (allocate()). It owns no request state and
// never samples.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/device_picks.h"
#include "engine/model/forward_batch.h"
#include "engine/scheduler.h"
#include "engine/spec/model_proposer.h"
#include "kernels/backend.h"

namespace baton {

// Rows [begin, end) of a forward's logits.
struct RowRange {
  std::size_t begin = 0, end = 0;
  bool operator==(const RowRange&) const = default;
};

// The logits rows the host must read when it cannot read device memory: the rows of every chunk
// that is not flagged on_device, with the rows of consecutive such chunks merged into one
// range (one copy each). first_row[i], num_rows[i]: chunk i's rows, in row order.
void host_row_ranges(std::span<const std::size_t> first_row, std::span<const std::int32_t> num_rows,
                     std::span<const char> on_device, std::vector<RowRange>& out);

class StepBatch {
 public:
  // The chunks must outlive the batch's use (their token spans point into the requests). The
  // batch is this object's own, valid (and reused) until the next build().
  // Device memory for the picked ids of up to max_num_logits rows per forward.
  absl::Status allocate(Backend& backend, std::int32_t max_num_logits);

  ForwardBatch& build(std::span<const ScheduledChunk> chunks, const TargetStateSpec& states);
  // device[i]: how chunk i's tokens are picked on the device (its first row's settings), or
  // temperature < 0 when the host samples it and needs its logits rows.
  void fetch(const ForwardOutput& out, Backend& backend, std::int32_t vocab,
             std::span<const SampleRowParams> device);
  // The tokens of the chunks flagged in fetch() (see device_tokens()).
  void pick_on_device(const ForwardOutput& out, Backend& backend);

  // Chunk i's logits: [drafts + 1, vocab] for a verification, [1, vocab] when it samples, empty
  // otherwise.
  std::span<const float> logits(std::size_t chunk) const;
  // Chunk i's tokens picked on the device, one per logits row (kArgmaxHasNaN / kArgmaxNoFinite for
  // a row without one), for a chunk flagged in fetch(); empty otherwise.
  std::span<const std::int32_t> device_tokens(std::size_t chunk) const;
  // Chunk i's captured states (its rows of the forward's capture tensors; no tensors when nothing
  // is captured). Valid until the next forward.
  TargetStateRows states(std::size_t chunk) const;

 private:
  ForwardBatch batch_;
  std::vector<std::vector<std::int32_t>> logits_indices_;  // per chunk
  std::vector<std::vector<std::int32_t>> verify_tokens_;   // pending token + drafts, per chunk
  std::vector<std::size_t> logits_row_, token_row_;        // per chunk: first logits row / token
  std::vector<std::int32_t> num_logits_, num_tokens_;
  TargetStateSpec states_;
  std::int32_t vocab_ = 0;
  std::span<const float> logits_;  // this step's logits: host_logits_, or the device's own rows
  std::vector<float> host_logits_;  // only the rows of chunks the host samples are filled
  std::vector<SampleRowParams> device_;  // per chunk, as fetch() was told
  std::vector<char> on_device_;          // per chunk: device_[i].temperature >= 0
  std::vector<RowRange> host_rows_;
  std::vector<SampleRowParams> row_params_;  // per logits row, for sample_rows()
  DevicePicks picks_;                          // [max_num_logits] ids
  std::span<const std::int32_t> step_picks_;  // this step's, from picks_
  std::vector<TensorView> state_tensors_;  // the forward's captures, in TargetStateSpec order
  std::uint64_t forward_id_ = 0;           // fetch() calls so far
};

}  // namespace baton
