// write_kv (attention.cuh): each new token's key and value rows into their slot of the paged KV
// cache, one thread per 4-element (or 1-element, when unaligned) piece of a (token, kv head) row.
// A BF16 cache stores each F32 value rounded to nearest even, exactly as the CPU's write_kv does.
// Negative slots are skipped; cache offsets are int64.
//
// Must not: allocate, synchronize with the host, or write outside the slot a token names.
#include <cstdint>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/float_vec.cuh"

namespace baton::cuda {
namespace {

constexpr int kWriteThreads = 256;

// One thread per W-element vector of one (token, kv head) row of k and of v.
// k, v: [tokens, kv_heads, head_dim] F32 (strides in elements); slots: [tokens] I32, slot =
// block * block_size + offset, negative = skip; cache: [num_blocks, 2, block_size, kv_heads, head_dim]
// of T (float or BF16).
template <int W, class T>
__global__ void write_kv_kernel(HeadsArg k, HeadsArg v, const std::int32_t* __restrict__ slots, KvCacheArg cache) {
  const int vecs = cache.head_dim / W;                                                // per head row
  const std::int64_t per_token = static_cast<std::int64_t>(cache.kv_heads) * vecs;  // vectors per token
  const std::int64_t total = k.tokens * per_token;
  const std::int64_t row = static_cast<std::int64_t>(cache.kv_heads) * cache.head_dim;  // elements per cached token
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / per_token;
    const std::int64_t slot = slots[t];
    if (slot < 0) continue;
    const std::int64_t block = slot / cache.block_size, offset = slot % cache.block_size;
    if (block >= cache.num_blocks) continue;  // the host validates slots; never write out of bounds
    const int in_token = static_cast<int>(e % per_token);
    const int h = in_token / vecs, d = (in_token % vecs) * W;
    T* key_dst = static_cast<T*>(cache.data) + (block * 2 * cache.block_size + offset) * row +
                 static_cast<std::int64_t>(h) * cache.head_dim + d;
    T* value_dst = key_dst + cache.block_size * row;
    store_vec<W>(key_dst, load_vec<W>(k.data + t * k.stride0 + h * k.stride1 + d));
    store_vec<W>(value_dst, load_vec<W>(v.data + t * v.stride0 + h * v.stride1 + d));
  }
}

inline bool heads_vec4(const HeadsArg& x) { return aligned(x.data, 16) && x.stride0 % 4 == 0 && x.stride1 % 4 == 0; }

template <class T>
cudaError_t launch_write_kv(HeadsArg k, HeadsArg v, const std::int32_t* slot_mapping, KvCacheArg cache,
                            cudaStream_t stream) {
  const bool vec4 = cache.head_dim % 4 == 0 && aligned(cache.data, 4 * sizeof(T)) && heads_vec4(k) && heads_vec4(v);
  const std::int64_t total = k.tokens * cache.kv_heads * (vec4 ? cache.head_dim / 4 : cache.head_dim);
  const unsigned grid = grid_stride_blocks(total, kWriteThreads);
  if (vec4) {
    write_kv_kernel<4, T><<<grid, kWriteThreads, 0, stream>>>(k, v, slot_mapping, cache);
  } else {
    write_kv_kernel<1, T><<<grid, kWriteThreads, 0, stream>>>(k, v, slot_mapping, cache);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t write_kv(HeadsArg k, HeadsArg v, const std::int32_t* slot_mapping, KvCacheArg cache, cudaStream_t stream) {
  if (k.tokens == 0 || cache.kv_heads == 0 || cache.head_dim == 0) return cudaSuccess;
  if (cache.block_size <= 0 || k.heads != cache.kv_heads || v.heads != cache.kv_heads ||
      k.head_dim != cache.head_dim || v.head_dim != cache.head_dim || v.tokens != k.tokens) {
    return cudaErrorInvalidValue;
  }
  switch (cache.type) {
    case KvType::kF32: return launch_write_kv<float>(k, v, slot_mapping, cache, stream);
    case KvType::kBF16: return launch_write_kv<__nv_bfloat16>(k, v, slot_mapping, cache, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace baton::cuda
