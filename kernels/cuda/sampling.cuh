// Sampling on the device (Backend::sample_rows): each row of logits becomes one token id, drawn
// with the request's own counter-based uniform (kernels/philox.h), so a sampled step copies 4
// bytes per row to the host instead of the row. The processing is the host Sampler's for requests
// without penalties or a min_tokens mask (engine/sample/sampler.h; docs/engine.md): temperature,
// top-k (ties at the k-th value kept), top-p over (logit descending, id ascending), min-p, then an
// inverse-CDF draw in id order. Every reduction has a fixed order, so a row's token does not
// depend on the batch or on the run.
#pragma once

#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

// One row's settings; laid out as Backend's SampleRowParams (cuda_backend.cc checks).
struct SampleRowArgs {
  float temperature;      // <= 1e-5: greedy, the lowest argmax; < 0: skip the row (out untouched)
  std::int32_t top_k;     // <= 0 or >= vocab: off
  float top_p;            // >= 1: off
  float min_p;            // <= 0: off
  std::uint64_t seed;
  std::int64_t position;  // the row's draw is uniform 0 of stream (seed, token purpose, position)
};

// out[r] = row r's token, `has_nan` when the row holds a NaN (or, sampled, its max is +inf after
// temperature), `no_finite` when no entry is above -inf. rows: device [logits.count] SampleRowArgs.
cudaError_t sample_rows(RowsArg logits, const SampleRowArgs* rows, std::int32_t* out, std::int32_t has_nan,
                        std::int32_t no_finite, cudaStream_t stream);

}  // namespace baton::cuda
