// StepBatch: one engine step's forward, from the scheduler's chunks to per-chunk host rows.
//   build()  turns the chunks into a ForwardBatch: each chunk's token span (for a verification,
//            the pending token followed by the drafts), the positions that want logits, and the
//            hidden states the proposer wants captured;
//   fetch()  copies the logits and captured states to the host in one copy per tensor (the
//            logits are read in place where the host can read device memory), and gives each
//            chunk its rows: logits [rows, vocab], states [tokens, width] interleaved
//            per token as TargetStateConsumer::observe() takes them.
// Buffers are reused from step to step. It owns no request state and never samples.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/forward_batch.h"
#include "engine/scheduler.h"
#include "engine/spec/model_proposer.h"
#include "kernels/backend.h"

namespace baton {

class StepBatch {
 public:
  // The chunks must outlive the batch's use (their token spans point into the requests). The
  // batch is this object's own, valid (and reused) until the next build().
  ForwardBatch& build(std::span<const ScheduledChunk> chunks, const TargetStateSpec& states);
  void fetch(const ForwardOutput& out, Backend& backend, std::int32_t vocab, std::int32_t hidden);

  // Chunk i's logits: [drafts + 1, vocab] for a verification, [1, vocab] when it samples, empty
  // otherwise.
  std::span<const float> logits(std::size_t chunk) const;
  // Chunk i's captured states: [num_tokens, width], or empty when nothing is captured.
  std::span<const float> states(std::size_t chunk) const;

 private:
  ForwardBatch batch_;
  std::vector<std::vector<std::int32_t>> logits_indices_;  // per chunk
  std::vector<std::vector<std::int32_t>> verify_tokens_;   // pending token + drafts, per chunk
  std::vector<std::size_t> logits_row_, token_row_;        // per chunk: first logits row / token
  std::vector<std::int32_t> num_logits_, num_tokens_;
  TargetStateSpec states_;
  std::int32_t vocab_ = 0, width_ = 0;
  std::span<const float> logits_;  // this step's logits: host_logits_, or the device's own rows
  std::vector<float> host_logits_;
  std::vector<float> host_states_;
  std::vector<float> staging_;
};

}  // namespace baton
