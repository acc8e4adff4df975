// recurrent_seqs: the CPU recurrent ops' reading of a RecurrentBatch — each sequence's rows, state
// group and slots, checked against the state view — and the address of a state slot. Shared by
// the Gated DeltaNet (linear_attention.cc) and Mamba-2 (mamba2.cc) kernels.
//
// Must not: decide which slots a sequence keeps (RecurrentBatch's contract does).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "kernels/backend.h"

namespace baton::cpu {

// One sequence of a RecurrentBatch.
struct RecurrentSeq {
  std::int64_t first_row = 0, tokens = 0;
  std::int32_t group = -1, slot_in = -1;
  // Tokens whose following state is stored: the last min(tokens, slots); token j's goes to slot
  // j - first_kept.
  std::int64_t first_kept = 0;
};

inline std::vector<RecurrentSeq> read_batch(const RecurrentBatch& batch, const TensorView& state, std::int64_t rows) {
  BATON_CHECK(batch.seqs.dtype == DType::kI32 && batch.seqs.ndim == 2 && batch.seqs.dim(1) == 4 && batch.slots >= 1,
              "recurrent batch: ", batch.seqs.describe(), ", ", batch.slots, " slots");
  BATON_CHECK(state.dtype == DType::kF32 && state.ndim == 3 && state.dim(1) == batch.slots && state.stride(2) == 1,
              "recurrent state: ", state.describe(), " for ", batch.slots, " slots");
  std::vector<RecurrentSeq> seqs(static_cast<std::size_t>(batch.seqs.dim(0)));
  const auto* p = batch.seqs.ptr<const std::int32_t>();
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    RecurrentSeq& q = seqs[s];
    q.first_row = p[4 * s];
    q.tokens = p[4 * s + 1];
    q.group = p[4 * s + 2];
    q.slot_in = p[4 * s + 3];
    BATON_CHECK(q.first_row >= 0 && q.tokens >= 0 && q.first_row + q.tokens <= rows && q.group < state.dim(0) &&
                    q.slot_in < batch.slots,
                "recurrent sequence ", s, ": rows [", q.first_row, ", +", q.tokens, ") of ", rows, ", group ", q.group,
                " of ", state.dim(0), ", slot ", q.slot_in, " of ", batch.slots);
    q.first_kept = q.tokens - std::min<std::int64_t>(q.tokens, batch.slots);
  }
  return seqs;
}

// Slot `slot` of `group` in a [groups, slots, n] state view.
inline float* slot_ptr(const TensorView& state, std::int32_t group, std::int64_t slot) {
  return state.ptr<float>() + group * state.stride(0) + slot * state.stride(1);
}

// The `n` floats at `offset` of the state sequence `s` starts from (its slot_in), into dst; zeros
// when it starts from the zero state.
inline void load_start_state(const RecurrentSeq& s, const TensorView& state, std::int64_t offset, std::int64_t n,
                             float* dst) {
  if (s.group >= 0 && s.slot_in >= 0) {
    std::memcpy(dst, slot_ptr(state, s.group, s.slot_in) + offset, static_cast<std::size_t>(n) * sizeof(float));
  } else {
    std::fill_n(dst, n, 0.0f);
  }
}

// Stores `n` floats at `offset` as the state after the sequence's token t, when RecurrentBatch
// keeps that one (the last min(tokens, slots); padding sequences keep none).
inline void store_state_after(const RecurrentSeq& s, std::int64_t t, const TensorView& state, std::int64_t offset,
                              std::int64_t n, const float* src) {
  if (s.group >= 0 && t >= s.first_kept) {
    std::memcpy(slot_ptr(state, s.group, t - s.first_kept) + offset, src, static_cast<std::size_t>(n) * sizeof(float));
  }
}

}  // namespace baton::cpu
