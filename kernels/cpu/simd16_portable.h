// V16: sixteen f32 lanes, the unit every CPU kernel computes in. This file is the portable
// definition and the contract; simd16_avx2.h and simd16_avx512.h implement the same operations
// with intrinsics and must give bit-identical results:
//  - loads of F32/BF16/F16 widen exactly to f32; partial loads zero the missing lanes;
//  - vfma is a fused multiply-add (one rounding), every other op rounds once, to nearest even;
//  - vreduce_add sums lanes in one fixed tree: (i, i+8), then (i, i+4), (i, i+2), (i, i+1);
//  - vload_bf16_pairs splits 32 BF16 values into even[l] = p[2l] and odd[l] = p[2l + 1] (the
//    layout a 64-byte load has in its 32-bit words, so SIMD tiers widen with a shift and a mask).
// Kernels written on V16 therefore produce the same bits on every tier, and the reduction order of
// a row never depends on the batch it is in.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"

struct V16 {
  float lane[16];
};

constexpr int kGemmMaxRows = 1;
constexpr int kGemmMaxCols = 4;
constexpr int kPackedRows = 4;    // packed GEMM: rows of x per register tile
constexpr int kPackedPanels = 1;  // packed GEMM: 16-column weight panels per register tile
constexpr int kPackedPanelsOneRow = 1;   // packed GEMM: panels per tile for calls of one row
constexpr int kPackedPanelsTwoRows = 1;  // ... and of two rows (gemm_packed_kernels.h)
constexpr int kPackedFewRows = 0;        // packed GEMM: 3+ rows always take kPackedPanels
constexpr int kPackedPanelsFewRows = 1;  // (unused here; see simd16_avx512.h)
constexpr bool kAttentionWideScores = false;  // attention scores 16 keys at a time (vreduce_add16)
constexpr int kAttentionValueRegs = 4;        // attention: V16 accumulators per head-dim chunk
constexpr int kAttentionValueRows = 2;     // attention: rows whose value sums share the value loads
constexpr int kAttentionRowValueRegs = 2;  // ... and V16 accumulators per row in such a pass

inline V16 vzero() { return V16{}; }
inline V16 vset1(float a) {
  V16 r;
  for (float& x : r.lane) x = a;
  return r;
}
inline V16 vload(const float* p) {
  V16 r;
  std::memcpy(r.lane, p, sizeof(r.lane));
  return r;
}
inline V16 vload_n(const float* p, int n) {
  V16 r{};
  std::memcpy(r.lane, p, static_cast<std::size_t>(n) * sizeof(float));
  return r;
}
inline V16 vload_bf16_n(const std::uint16_t* p, int n) {
  V16 r{};
  for (int i = 0; i < n; ++i) r.lane[i] = baton::bf16_to_f32(p[i]);
  return r;
}
inline V16 vload_bf16(const std::uint16_t* p) { return vload_bf16_n(p, 16); }
inline void vload_bf16_pairs_n(const std::uint16_t* p, int n, V16& even, V16& odd) {
  even = V16{};
  odd = V16{};
  for (int i = 0; i < n; ++i) (i % 2 == 0 ? even : odd).lane[i / 2] = baton::bf16_to_f32(p[i]);
}
inline void vload_bf16_pairs(const std::uint16_t* p, V16& even, V16& odd) { vload_bf16_pairs_n(p, 32, even, odd); }
inline V16 vload_f16_n(const std::uint16_t* p, int n) {
  V16 r{};
  for (int i = 0; i < n; ++i) r.lane[i] = baton::f16_to_f32(p[i]);
  return r;
}
inline V16 vload_f16(const std::uint16_t* p) { return vload_f16_n(p, 16); }
inline void vstore(float* p, V16 a) { std::memcpy(p, a.lane, sizeof(a.lane)); }
inline void vstore_n(float* p, V16 a, int n) {
  std::memcpy(p, a.lane, static_cast<std::size_t>(n) * sizeof(float));
}

#define BATON_V16_LANEWISE(name, expr)    \
  inline V16 name(V16 a, V16 b) {         \
    V16 r;                                \
    for (int i = 0; i < 16; ++i) {        \
      const float x = a.lane[i];          \
      const float y = b.lane[i];          \
      r.lane[i] = (expr);                 \
    }                                     \
    return r;                             \
  }
BATON_V16_LANEWISE(vadd, x + y)
BATON_V16_LANEWISE(vsub, x - y)
BATON_V16_LANEWISE(vmul, x * y)
BATON_V16_LANEWISE(vdiv, x / y)
// Same operand rule as x86 max/min: when either is NaN or both are zero, the second operand wins.
BATON_V16_LANEWISE(vmax, x > y ? x : y)
BATON_V16_LANEWISE(vmin, x < y ? x : y)
#undef BATON_V16_LANEWISE

inline V16 vfma(V16 a, V16 b, V16 c) {
  V16 r;
  for (int i = 0; i < 16; ++i) r.lane[i] = std::fma(a.lane[i], b.lane[i], c.lane[i]);
  return r;
}
inline V16 vround(V16 a) {
  V16 r;
  for (int i = 0; i < 16; ++i) r.lane[i] = std::nearbyint(a.lane[i]);
  return r;
}
inline V16 vpow2i(V16 n) {
  V16 r;
  for (int i = 0; i < 16; ++i) {
    const auto e = static_cast<std::uint32_t>(static_cast<std::int32_t>(n.lane[i]) + 127);
    r.lane[i] = std::bit_cast<float>(e << 23);
  }
  return r;
}

inline float vreduce_add(V16 a) {
  float s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; ++i) s8[i] = a.lane[i] + a.lane[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}
// Lane j = vreduce_add(a[j]), for 16 vectors at once (SIMD tiers share the adds between them).
inline V16 vreduce_add16(const V16* a) {
  V16 r;
  for (int j = 0; j < 16; ++j) r.lane[j] = vreduce_add(a[j]);
  return r;
}
inline float vreduce_max(V16 a) {
  float m = a.lane[0];
  for (int i = 1; i < 16; ++i) m = a.lane[i] > m ? a.lane[i] : m;
  return m;
}
