// The cuBLAS path of linear() (gemm_internal.cuh: linear_cublas), used only when the backend is not
// batch-invariant and m > kCublasMinRows. Fast for prefill-sized m; its bits depend on m (cuBLAS
// picks kernels, tiles and split-k by shape).
//
// Row-major y [m, n] = x [m, k] @ w[n, k]^T is, read column-major, Y' [n x m] = W' [k x n]^T X' [k x m]
// with W' = w (ld ldw), X' = x (ld ldx), Y' = y (ld ldy): cublasGemmEx(OP_T, OP_N, n, m, k).
//   - F32 weights: CUBLAS_COMPUTE_32F_PEDANTIC (plain F32 FMA, never TF32, whatever the math mode
//     or NVIDIA_TF32_OVERRIDE say).
//   - BF16/F16 weights: cuBLAS takes no mixed F32 x 16-bit inputs, so x is first rounded (to
//     nearest even) into the weight's dtype in GemmContext::scratch, then CUBLAS_COMPUTE_32F
//     (tensor cores, F32 accumulation) with an F32 output. This rounds x, which the invariant path
//     does not: expect ~2^-9 (BF16) / 2^-11 (F16) relative noise per product, and F16 overflow to
//     inf for |x| > 65504.
//   - Bias: a separate epilogue kernel y[r, c] += bias[c] after the GEMM.
//   - CUBLAS_STATUS_NOT_SUPPORTED (a layout cuBLAS declines) falls back to the invariant kernel;
//     other failures return cuda_error_from_cublas(status).
// Scratch: m * k * 2 bytes, cudaMallocAsync'd on the call's stream when a call needs more than the
// context holds (rounded up to a power of two, at least 1 MiB, so a growing prefill re-allocates a
// few times, not on every call). The old block is kept until gemm_destroy, not freed: a CUDA graph
// captured while it was current replays its address. Never grown inside a capture (the call fails
// with cudaErrorStreamCaptureUnsupported instead). No host synchronisation.
//
// Must not: synchronise the host; be used when batch invariance is required; change cuBLAS's math
// mode or stream behind the context's back (the handle belongs to GemmContext).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/gemm_internal.cuh"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;


// dst [m, k] contiguous 16-bit = round-to-nearest-even(x [m, k], rows ldx apart).
template <WeightType W>
__global__ void convert_x_kernel(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k,
                                 std::uint16_t* dst) {
  const std::int64_t total = m * k;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[(e / k) * ldx + e % k];
    dst[e] = W == WeightType::kBF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

// y [m, n] (rows ldy apart) += bias [n].
__global__ void add_bias_kernel(float* y, std::int64_t ldy, std::int64_t m, std::int64_t n, const float* bias) {
  const std::int64_t total = m * n;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = e % n;
    float* p = y + (e / n) * ldy + c;
    *p = __fadd_rn(*p, bias[c]);
  }
}

cudaError_t ensure_scratch(GemmContext& ctx, std::size_t bytes, cudaStream_t stream) {
  if (ctx.scratch_bytes >= bytes) return cudaSuccess;
  // Growing inside a capture would make the scratch a graph-owned allocation that eager calls then
  // use after the graph frees it. The engine runs a shape eagerly before capturing it, so this is
  // a caller's bug: fail the capture (the engine then runs without graphs).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    return cudaErrorStreamCaptureUnsupported;
  }
  std::size_t grown = std::size_t{1} << 20;
  while (grown < bytes) grown *= 2;
  void* block = nullptr;
  const cudaError_t err = cudaMallocAsync(&block, grown, stream);
  if (err != cudaSuccess) return err;
  // Graphs captured with the old block replay it: keep it (gemm_destroy frees it).
  if (ctx.scratch != nullptr) ctx.retired_scratch.push_back(ctx.scratch);
  ctx.scratch = block;
  ctx.scratch_bytes = grown;
  return cudaSuccess;
}

}  // namespace

cudaError_t cuda_error_from_cublas(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
    case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH: return cudaErrorNotSupported;
    case CUBLAS_STATUS_NOT_INITIALIZED: return cudaErrorInitializationError;
    default: return cudaErrorUnknown;
  }
}

cudaError_t linear_cublas(GemmContext& ctx, const LinearArgs& a, cudaStream_t stream) {
  if (ctx.stream != stream) {
    const cublasStatus_t s = ctx.cublas->set_stream(ctx.handle, stream);
    if (s != CUBLAS_STATUS_SUCCESS) return cuda_error_from_cublas(s);
    ctx.stream = stream;
  }
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const float one = 1.0f, zero = 0.0f;  // host pointer mode: read when the call is made
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  if (a.w_type == WeightType::kF32) {
    status = ctx.cublas->gemm_ex(ctx.handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, a.w, CUDA_R_32F,
                          static_cast<int>(a.ldw), a.x, CUDA_R_32F, static_cast<int>(a.ldx), &zero, a.y, CUDA_R_32F,
                          static_cast<int>(a.ldy), CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
  } else {
    const std::size_t bytes = static_cast<std::size_t>(a.m) * static_cast<std::size_t>(a.k) * sizeof(std::uint16_t);
    cudaError_t err = ensure_scratch(ctx, bytes, stream);
    if (err != cudaSuccess) return err;
    auto* xh = static_cast<std::uint16_t*>(ctx.scratch);
    const unsigned blocks = grid_stride_blocks(a.m * a.k, kThreads);
    const bool bf16 = a.w_type == WeightType::kBF16;
    if (bf16) {
      convert_x_kernel<WeightType::kBF16><<<blocks, kThreads, 0, stream>>>(a.x, a.ldx, a.m, a.k, xh);
    } else {
      convert_x_kernel<WeightType::kF16><<<blocks, kThreads, 0, stream>>>(a.x, a.ldx, a.m, a.k, xh);
    }
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    status = ctx.cublas->gemm_ex(ctx.handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, a.w, type, static_cast<int>(a.ldw), xh,
                          type, k, &zero, a.y, CUDA_R_32F, static_cast<int>(a.ldy), CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
  }
  // cuBLAS may decline a layout (e.g. 16-bit data at an odd address or stride on some versions):
  // nothing was written, so the invariant kernel computes it instead.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return linear_invariant(a, stream);
  if (status != CUBLAS_STATUS_SUCCESS) return cuda_error_from_cublas(status);
  if (a.bias != nullptr) {
    add_bias_kernel<<<grid_stride_blocks(a.m * a.n, kThreads), kThreads, 0, stream>>>(a.y, a.ldy, a.m, a.n, a.bias);
  }
  return cudaGetLastError();
}

}  // namespace baton::cuda
