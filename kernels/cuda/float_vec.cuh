// Float vectors for the attention and KV-cache kernels (attention.cu, kv_write.cu): W consecutive
// floats loaded or stored with one 32-, 64- or 128-bit access, or W consecutive BF16 values (KV
// cache rows) loaded widened to floats and stored rounded from them. Device helpers only.
//
// Must not: hide arithmetic (these only move bits; BF16 widening is exact and its rounding is the
// CPU's f32_to_bf16 in kernels/dtype.h, bit for bit), or be used on addresses that are not aligned
// to W elements (aligned() tells).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
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

// ---- BF16 rows (KV cache) -------------------------------------------------------------------------

__device__ __forceinline__ float widen_bf16(unsigned bits) { return __uint_as_float(bits << 16); }

// Round to nearest even; NaN stays a quiet NaN with its high bits (kernels/dtype.h f32_to_bf16).
__device__ __forceinline__ unsigned round_to_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x40u) & 0xffffu;
  return ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) & 0xffffu;
}

// W consecutive BF16 values widened to floats, read through the read-only cache (8-, 4- or 2-byte
// access: the address is W-element aligned).
template <int W>
__device__ __forceinline__ Vec<W> load_cached(const __nv_bfloat16* p) {
  Vec<W> r;
  if constexpr (W == 4) {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(p));
    r.v[0] = widen_bf16(x.x & 0xffffu), r.v[1] = widen_bf16(x.x >> 16);
    r.v[2] = widen_bf16(x.y & 0xffffu), r.v[3] = widen_bf16(x.y >> 16);
  } else if constexpr (W == 2) {
    const unsigned x = __ldg(reinterpret_cast<const unsigned*>(p));
    r.v[0] = widen_bf16(x & 0xffffu), r.v[1] = widen_bf16(x >> 16);
  } else {
    r.v[0] = widen_bf16(__ldg(reinterpret_cast<const unsigned short*>(p)));
  }
  return r;
}

template <int W>
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const Vec<W>& x) {
  if constexpr (W == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(round_to_bf16(x.v[0]) | round_to_bf16(x.v[1]) << 16,
                                              round_to_bf16(x.v[2]) | round_to_bf16(x.v[3]) << 16);
  } else if constexpr (W == 2) {
    *reinterpret_cast<unsigned*>(p) = round_to_bf16(x.v[0]) | round_to_bf16(x.v[1]) << 16;
  } else {
    *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(round_to_bf16(x.v[0]));
  }
}

inline bool aligned(const void* p, int bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace baton::cuda
