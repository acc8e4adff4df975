#include "kernels/cuda/argmax.cuh"

#include <cmath>
#include <cstdint>

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// A candidate pick: the better of two is the larger value, the lower index on equal values (so
// -0 and +0 tie). kNone (an index above any row) stands for "no entry above -inf seen".
constexpr std::int32_t kNone = INT32_MAX;

struct Pick {
  float value;
  std::int32_t index;
};

__device__ inline Pick better(Pick a, Pick b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// One block per row. Each thread scans a fixed stride of columns in increasing order keeping the
// first strict maximum, then the picks meet in a warp shuffle and a pass over the warps; every
// merge takes the lower index on ties, so the result is the row's lowest argmax, independent of
// how the columns were split.
__global__ void argmax_rows_kernel(RowsArg logits, std::int32_t* __restrict__ out, std::int32_t has_nan,
                                   std::int32_t no_finite) {
  const std::int64_t r = blockIdx.x;
  const float* row = row_ptr<const float>(logits, r);
  Pick best{-INFINITY, kNone};
  int nan = 0;
  for (std::int64_t c = threadIdx.x; c < logits.cols; c += kThreads) {
    const float x = row[c];
    nan |= x != x;
    if (x > best.value) best = Pick{x, static_cast<std::int32_t>(c)};
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Pick other{__shfl_down_sync(0xffffffffu, best.value, offset),
                     __shfl_down_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  nan = __syncthreads_or(nan);
  __shared__ Pick warp_best[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Pick p = warp_best[0];
    for (int w = 1; w < kWarps; ++w) p = better(p, warp_best[w]);
    out[r] = nan != 0 ? has_nan : (p.index == kNone ? no_finite : p.index);
  }
}

}  // namespace

cudaError_t argmax_rows(RowsArg logits, std::int32_t* out, std::int32_t has_nan, std::int32_t no_finite,
                        cudaStream_t stream) {
  if (logits.count == 0) return cudaSuccess;
  if (logits.count > 0x7fffffff || logits.cols <= 0 || logits.cols > INT32_MAX - 1) return cudaErrorInvalidValue;
  argmax_rows_kernel<<<static_cast<unsigned>(logits.count), kThreads, 0, stream>>>(logits, out, has_nan, no_finite);
  return cudaGetLastError();
}

}  // namespace baton::cuda
