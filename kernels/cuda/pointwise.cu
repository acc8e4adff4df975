// Row-wise and element-wise ops (pointwise.cuh). One thread block per row where the row needs a
// reduction (RMSNorm), a grid-stride loop over elements otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/pointwise.cuh"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;


__device__ inline float widen(const void* base, WeightType type, std::int64_t i) {
  switch (type) {
    case WeightType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case WeightType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// Element e of a rows view: row e / cols, column e % cols.
template <class T>
__device__ inline T* element(const RowsArg& a, std::int64_t e) {
  return row_ptr<T>(a, e / a.cols) + e % a.cols;
}

__global__ void embedding_kernel(const void* table, WeightType type, std::int64_t table_stride, std::int64_t vocab,
                                 const std::int32_t* ids, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / out.cols, c = e % out.cols;
    const std::int32_t id = ids[t];
    // Ids are validated on the host (BatchPlan); an out-of-range one reads nothing.
    *element<float>(out, e) = id >= 0 && id < vocab ? widen(table, type, id * table_stride + c) : 0.0f;
  }
}

// Threads per row for rms_norm: about four columns each, a whole number of warps, at most 1024. It
// depends on the number of columns alone, so a row's reduction order does too.
inline int rms_norm_threads(std::int64_t cols) {
  int t = 32;
  while (t < 1024 && 4 * static_cast<std::int64_t>(t) < cols) t *= 2;
  return t;
}

// A fixed butterfly over the warp; every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// One block per row (blockDim.x = rms_norm_threads(cols)): sum of squares in a fixed order (each
// thread an fmaf chain over columns t, t + blockDim.x, ..., a butterfly over each warp, then the
// same butterfly over the warps' sums, zeros for the missing warps), so the row's result is the
// same in any batch. Two barriers in all: a decode step's single row is latency, not bandwidth.
__global__ void __launch_bounds__(1024) rms_norm_kernel(RowsArg x, const float* __restrict__ weight, float eps,
                                                        RowsArg out) {
  __shared__ float warp_sums[32];
  __shared__ float inv_s;
  const std::int64_t r = blockIdx.x;
  const float* xr = row_ptr<float>(x, r);
  float* yr = row_ptr<float>(out, r);
  const int threads = static_cast<int>(blockDim.x);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float ss = 0.0f;
#pragma unroll 4
  for (std::int64_t c = threadIdx.x; c < x.cols; c += threads) ss = __fmaf_rn(xr[c], xr[c], ss);
  ss = warp_sum(ss);
  if (lane == 0) warp_sums[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float total = lane < threads / 32 ? warp_sums[lane] : 0.0f;
    total = warp_sum(total);
    if (lane == 0) inv_s = rsqrtf(__fadd_rn(__fdiv_rn(total, static_cast<float>(x.cols)), eps));
  }
  __syncthreads();
  const float inv = inv_s;
#pragma unroll 4
  for (std::int64_t c = threadIdx.x; c < x.cols; c += threads) yr[c] = __fmul_rn(__fmul_rn(xr[c], inv), weight[c]);
}

__global__ void silu_mul_kernel(RowsArg gate_up, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / out.cols, c = e % out.cols;
    const float* in = row_ptr<const float>(gate_up, r);
    const float g = in[c];
    *element<float>(out, e) = g / (1.0f + expf(-g)) * in[out.cols + c];
  }
}

__global__ void silu_add_kernel(RowsArg x, RowsArg residual, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = *element<const float>(x, e);
    *element<float>(out, e) = *element<const float>(residual, e) + v / (1.0f + expf(-v));
  }
}

__global__ void add_kernel(RowsArg a, RowsArg b, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    *element<float>(out, e) = *element<const float>(a, e) + *element<const float>(b, e);
  }
}

__global__ void gather_rows_kernel(RowsArg src, const std::int32_t* indices, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / out.cols, c = e % out.cols;
    const std::int32_t i = indices[r];
    *element<float>(out, e) = i >= 0 && i < src.count ? row_ptr<const float>(src, i)[c] : 0.0f;
  }
}

// 4-byte elements of any type, moved as bits.
__global__ void copy_rows_kernel(RowsArg src, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    *element<std::uint32_t>(out, e) = *element<const std::uint32_t>(src, e);
  }
}

}  // namespace

cudaError_t embedding(const void* table, WeightType table_type, std::int64_t table_stride, std::int64_t hidden,
                      const std::int32_t* ids, std::int64_t tokens, RowsArg out, cudaStream_t stream) {
  (void)hidden;  // == out.cols
  if (tokens == 0 || out.cols == 0) return cudaSuccess;
  // The vocabulary size is not passed: rows are only read for ids the host checked; bound the
  // read by the largest id an int32 can hold.
  embedding_kernel<<<grid_stride_blocks(out.count * out.cols, kThreads), kThreads, 0, stream>>>(table, table_type, table_stride,
                                                                               INT32_MAX, ids, out);
  return cudaGetLastError();
}

cudaError_t rms_norm(RowsArg x, const float* weight, float eps, RowsArg out, cudaStream_t stream) {
  if (x.count == 0) return cudaSuccess;
  if (x.count > 0x7fffffff) return cudaErrorInvalidValue;
  rms_norm_kernel<<<static_cast<unsigned>(x.count), rms_norm_threads(x.cols), 0, stream>>>(x, weight, eps, out);
  return cudaGetLastError();
}

cudaError_t silu_mul(RowsArg gate_up, RowsArg out, cudaStream_t stream) {
  if (out.count * out.cols == 0) return cudaSuccess;
  silu_mul_kernel<<<grid_stride_blocks(out.count * out.cols, kThreads), kThreads, 0, stream>>>(gate_up, out);
  return cudaGetLastError();
}

cudaError_t silu_add(RowsArg x, RowsArg residual, RowsArg out, cudaStream_t stream) {
  if (out.count * out.cols == 0) return cudaSuccess;
  silu_add_kernel<<<grid_stride_blocks(out.count * out.cols, kThreads), kThreads, 0, stream>>>(x, residual, out);
  return cudaGetLastError();
}

cudaError_t add(RowsArg a, RowsArg b, RowsArg out, cudaStream_t stream) {
  if (out.count * out.cols == 0) return cudaSuccess;
  add_kernel<<<grid_stride_blocks(out.count * out.cols, kThreads), kThreads, 0, stream>>>(a, b, out);
  return cudaGetLastError();
}

cudaError_t gather_rows(RowsArg src, const std::int32_t* indices, RowsArg out, cudaStream_t stream) {
  if (out.count * out.cols == 0) return cudaSuccess;
  gather_rows_kernel<<<grid_stride_blocks(out.count * out.cols, kThreads), kThreads, 0, stream>>>(src, indices, out);
  return cudaGetLastError();
}

cudaError_t copy_rows(RowsArg src, RowsArg out, cudaStream_t stream) {
  if (out.count * out.cols == 0) return cudaSuccess;
  copy_rows_kernel<<<grid_stride_blocks(out.count * out.cols, kThreads), kThreads, 0, stream>>>(src, out);
  return cudaGetLastError();
}

}  // namespace baton::cuda
