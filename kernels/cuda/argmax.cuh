// Greedy picks on the device (Backend::argmax_rows): each row of logits becomes one token id, so a
// greedy step copies 4 bytes per row to the host instead of the row. Comparisons only, so the
// result is exactly the CPU twin's (kernels/cpu/argmax.h) whatever the batch or the launch shape.
#pragma once

#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

// out[r] = the lowest index of the largest entry of row r of `logits` (F32; -0 and +0 tie),
// `has_nan` when the row holds a NaN, `no_finite` when every entry is -inf.
cudaError_t argmax_rows(RowsArg logits, std::int32_t* out, std::int32_t has_nan, std::int32_t no_finite,
                        cudaStream_t stream);

}  // namespace baton::cuda
