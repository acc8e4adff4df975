// Float vectors for the attention and KV-cache kernels (attention.cu, kv_write.cu): W consecutive
// floats loaded or stored with one 32-, 64- or 128-bit access. Device helpers only.
//
// Must not: hide arithmetic (these only move bits), or be used on addresses that are not W-float
// aligned (aligned() tells).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace baton::cuda {

// W consecutive floats moved with one 32-, 64- or 128-bit access (the address is W-float aligned).
template <int W>
struct Vec {
  float v[W];
};

template <int W>
__device__ __forceinline__ Vec<W> zero_vec() {
  Vec<W> r;
#pragma unroll
  for (int e = 0; e < W; ++e) r.v[e] = 0.0f;
  return r;
}

// Plain load (global or shared memory).
template <int W>
__device__ __forceinline__ Vec<W> load_vec(const float* p) {
  Vec<W> r;
  if constexpr (W == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    r.v[0] = x.x, r.v[1] = x.y, r.v[2] = x.z, r.v[3] = x.w;
  } else if constexpr (W == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    r.v[0] = x.x, r.v[1] = x.y;
  } else {
    r.v[0] = *p;
  }
  return r;
}

// Load through the read-only cache: for KV cache rows, which no thread writes during attention.
template <int W>
__device__ __forceinline__ Vec<W> load_cached(const float* p) {
  Vec<W> r;
  if constexpr (W == 4) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = x.x, r.v[1] = x.y, r.v[2] = x.z, r.v[3] = x.w;
  } else if constexpr (W == 2) {
    const float2 x = __ldg(reinterpret_cast<const float2*>(p));
    r.v[0] = x.x, r.v[1] = x.y;
  } else {
    r.v[0] = __ldg(p);
  }
  return r;
}

template <int W>
__device__ __forceinline__ void store_vec(float* p, const Vec<W>& x) {
  if constexpr (W == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
  } else if constexpr (W == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(x.v[0], x.v[1]);
  } else {
    *p = x.v[0];
  }
}

inline bool aligned(const void* p, int bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace baton::cuda
