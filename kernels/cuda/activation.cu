#include "kernels/cuda/activation.cuh"

namespace baton::cuda {
namespace {

__global__ void silu_mul_kernel(const float* __restrict__ gate_up,  // [tokens, 2 * inter]
                                float* __restrict__ out,            // [tokens, inter]
                                std::int64_t inter) {
  const std::int64_t t = blockIdx.y;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < inter;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate_up[t * 2 * inter + i];
    const float u = gate_up[t * 2 * inter + inter + i];
    out[t * inter + i] = g / (1.0f + expf(-g)) * u;
  }
}

}  // namespace

cudaError_t silu_mul_f32(const float* gate_up, float* out, std::int64_t tokens, std::int64_t inter,
                         cudaStream_t stream) {
  if (tokens == 0 || inter == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const auto blocks_x = static_cast<unsigned>((inter + kThreads - 1) / kThreads < 1024 ? (inter + kThreads - 1) / kThreads : 1024);
  silu_mul_kernel<<<dim3(blocks_x, static_cast<unsigned>(tokens)), kThreads, 0, stream>>>(gate_up, out, inter);
  return cudaGetLastError();
}

}  // namespace baton::cuda
