// Rotary embedding (rope.cuh). The angle is rounded to F32 and its cosine and sine taken in double,
// as the CPU backend does, so both backends build the same table; the rotation uses explicitly
// rounded multiplies and adds (no FMA contraction), the CPU's order of operations.
#include "kernels/cuda/rope.cuh"

namespace baton::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void rope_cos_sin_kernel(const std::int32_t* positions, std::int64_t tokens, const float* inv_freq,
                                    int half, float* cos_sin) {
  const std::int64_t total = tokens * half;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / half;
    const int i = static_cast<int>(e % half);
    const float angle = __fmul_rn(static_cast<float>(positions[t]), inv_freq[i]);
    float* row = cos_sin + t * 2 * half;
    row[i] = static_cast<float>(cos(static_cast<double>(angle)));
    row[half + i] = static_cast<float>(sin(static_cast<double>(angle)));
  }
}

// One thread per (token, head, i < half) pair of elements.
__global__ void apply_rope_kernel(HeadsArg x, const float* cos_sin) {
  const int half = x.head_dim / 2;
  const std::int64_t total = x.tokens * x.heads * half;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(e % half);
    const std::int64_t th = e / half;
    const std::int64_t t = th / x.heads;
    const int h = static_cast<int>(th % x.heads);
    float* v = x.data + t * x.stride0 + h * x.stride1;
    const float c = cos_sin[t * x.head_dim + i];
    const float s = cos_sin[t * x.head_dim + half + i];
    const float a = v[i], b = v[i + half];
    v[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    v[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}


}  // namespace

cudaError_t rope_cos_sin(const std::int32_t* positions, std::int64_t tokens, const float* inv_freq, int half,
                         float* cos_sin, cudaStream_t stream) {
  if (tokens == 0 || half == 0) return cudaSuccess;
  rope_cos_sin_kernel<<<grid_stride_blocks(tokens * half, kThreads), kThreads, 0, stream>>>(positions, tokens, inv_freq, half, cos_sin);
  return cudaGetLastError();
}

cudaError_t apply_rope(HeadsArg x, const float* cos_sin, cudaStream_t stream) {
  const std::int64_t total = x.tokens * x.heads * (x.head_dim / 2);
  if (total == 0) return cudaSuccess;
  apply_rope_kernel<<<grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(x, cos_sin);
  return cudaGetLastError();
}

}  // namespace baton::cuda
