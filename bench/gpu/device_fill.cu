// Random and constant fills on the GPU (device_fill.cuh): a grid-stride loop, one splitmix64 hash
// per element. Not a statistical-quality generator: it only has to give non-zero, finite,
// well-scaled data so that timings are not those of zeros.
#include <cuda_bf16.h>

#include "bench/gpu/device_fill.cuh"

namespace baton::bench {
namespace {

__device__ __forceinline__ float uniform_pm1(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  // 24 random bits -> [-1, 1)
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void bf16_uniform_kernel(__nv_bfloat16* dst, std::size_t n, float scale, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16(scale * uniform_pm1(seed, i));
  }
}

__global__ void f32_uniform_kernel(float* dst, std::size_t n, float scale, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = scale * uniform_pm1(seed, i);
  }
}

__global__ void f32_constant_kernel(float* dst, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

constexpr int kThreads = 256;
constexpr int kBlocks = 132 * 16;  // enough to fill any current GPU; the loop covers the rest

}  // namespace

cudaError_t fill_bf16_uniform(void* dst, std::size_t n, float scale, std::uint64_t seed) {
  if (n == 0) return cudaSuccess;
  bf16_uniform_kernel<<<kBlocks, kThreads>>>(static_cast<__nv_bfloat16*>(dst), n, scale, seed);
  return cudaGetLastError();
}

cudaError_t fill_f32_uniform(float* dst, std::size_t n, float scale, std::uint64_t seed) {
  if (n == 0) return cudaSuccess;
  f32_uniform_kernel<<<kBlocks, kThreads>>>(dst, n, scale, seed);
  return cudaGetLastError();
}

cudaError_t fill_f32_constant(float* dst, std::size_t n, float value) {
  if (n == 0) return cudaSuccess;
  f32_constant_kernel<<<kBlocks, kThreads>>>(dst, n, value);
  return cudaGetLastError();
}

}  // namespace baton::bench
