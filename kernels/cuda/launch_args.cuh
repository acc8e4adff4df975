// Plain argument structs for the CUDA launchers (kernels/cuda/*.cuh): raw device pointers, element
// strides and sizes, so that the .cu files never include the C++20 engine headers (nvcc compiles
// them as C++17) and the launchers can be called from ordinary C++.
//
// CudaBackend (cuda_backend.cc) checks shapes and dtypes and builds these from TensorViews; a
// launcher trusts them. Strides are in elements, not bytes.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace baton::cuda {

// A 1-3-D view seen as `count` rows of `cols` elements (leading dims flattened in row-major
// order), mirroring kernels/cpu/rows.h: row r starts at
// data + (r / inner) * stride0 + (r % inner) * stride1, and its elements are contiguous.
struct RowsArg {
  void* data = nullptr;
  std::int64_t count = 0;
  std::int64_t cols = 0;
  std::int64_t inner = 1;
  std::int64_t stride0 = 0;
  std::int64_t stride1 = 0;
};

template <class T>
__host__ __device__ inline T* row_ptr(const RowsArg& a, std::int64_t r) {
  return static_cast<T*>(a.data) + (r / a.inner) * a.stride0 + (r % a.inner) * a.stride1;
}

// Blocks of `threads` threads for a grid-stride loop over `elements` elements: enough to cover
// them, at least 1, and capped (the loop strides over the rest), so any size launches.
inline unsigned grid_stride_blocks(std::int64_t elements, int threads) {
  constexpr std::int64_t kMaxBlocks = 65535 * 8;
  const std::int64_t b = (elements + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

// Storage type of a weight or embedding table.
enum class WeightType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// [tokens, heads, head_dim] F32 with a contiguous last dimension; element (t, h, d) is at
// data + t * stride0 + h * stride1 + d.
struct HeadsArg {
  float* data = nullptr;
  std::int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;
  std::int64_t stride0 = 0;
  std::int64_t stride1 = 0;
};

// Element type of the paged KV cache: F32, or BF16 (raw bits, the values rounded to nearest even
// when written and widened exactly when read, as on the CPU).
enum class KvType : int { kF32 = 0, kBF16 = 1 };

// One layer of the paged KV cache, contiguous [num_blocks, 2, block_size, kv_heads, head_dim] of
// `type`: index 0 of the second dimension holds keys, 1 values.
struct KvCacheArg {
  void* data = nullptr;
  KvType type = KvType::kF32;
  std::int64_t num_blocks = 0;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

}  // namespace baton::cuda
