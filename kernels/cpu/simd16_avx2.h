// V16 on AVX2 + FMA + F16C: two ymm registers (lanes 0-7 and 8-15). Bit-identical to the other
// tiers; see simd16_portable.h for the contract. Include only from a translation unit compiled with
// -mavx2 -mfma -mf16c.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

struct V16 {
  __m256 lo, hi;
};

constexpr int kGemmMaxRows = 2;
constexpr int kGemmMaxCols = 2;
constexpr int kPackedRows = 4;    // packed GEMM: rows of x per register tile
constexpr int kPackedPanels = 1;  // packed GEMM: 16-column weight panels per register tile
constexpr int kPackedPanelsOneRow = 2;   // packed GEMM: panels per tile for calls of one row
constexpr int kPackedPanelsTwoRows = 1;  // ... and of two rows (gemm_packed_kernels.h)
constexpr int kPackedFewRows = 0;        // packed GEMM: 3+ rows always take kPackedPanels
constexpr int kPackedPanelsFewRows = 1;  // (unused here; see simd16_avx512.h)
constexpr bool kAttentionWideScores = false;  // 16 V16 accumulators would not fit in 16 ymm
constexpr int kAttentionValueRegs = 4;        // attention: V16 accumulators per head-dim chunk
constexpr int kAttentionValueRows = 2;     // attention: rows whose value sums share the value loads
constexpr int kAttentionRowValueRegs = 2;  // ... and V16 accumulators per row in such a pass

inline V16 vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 vset1(float a) { return {_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
inline V16 vload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V16 vload_n(const float* p, int n) {
  alignas(32) float tmp[16] = {};
  std::memcpy(tmp, p, static_cast<std::size_t>(n) * sizeof(float));
  return vload(tmp);
}
inline __m256 widen_bf16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline V16 vload_bf16(const std::uint16_t* p) {
  return {widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline V16 vload_bf16_n(const std::uint16_t* p, int n) {
  alignas(32) std::uint16_t tmp[16] = {};
  std::memcpy(tmp, p, static_cast<std::size_t>(n) * sizeof(std::uint16_t));
  return vload_bf16(tmp);
}
// 32 BF16 values in pair order: even[l] = p[2l], odd[l] = p[2l + 1] (see simd16_portable.h).
inline void vload_bf16_pairs(const std::uint16_t* p, V16& even, V16& odd) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  even.lo = _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16));
  even.hi = _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));
  odd.lo = _mm256_castsi256_ps(_mm256_and_si256(lo, mask));
  odd.hi = _mm256_castsi256_ps(_mm256_and_si256(hi, mask));
}
inline void vload_bf16_pairs_n(const std::uint16_t* p, int n, V16& even, V16& odd) {
  alignas(32) std::uint16_t tmp[32] = {};
  std::memcpy(tmp, p, static_cast<std::size_t>(n) * sizeof(std::uint16_t));
  vload_bf16_pairs(tmp, even, odd);
}
inline V16 vload_f16(const std::uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline V16 vload_f16_n(const std::uint16_t* p, int n) {
  alignas(32) std::uint16_t tmp[16] = {};
  std::memcpy(tmp, p, static_cast<std::size_t>(n) * sizeof(std::uint16_t));
  return vload_f16(tmp);
}
inline void vstore(float* p, V16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
inline void vstore_n(float* p, V16 a, int n) {
  alignas(32) float tmp[16];
  vstore(tmp, a);
  std::memcpy(p, tmp, static_cast<std::size_t>(n) * sizeof(float));
}

#define BATON_V16_BINOP(name, intr) \
  inline V16 name(V16 a, V16 b) { return {intr(a.lo, b.lo), intr(a.hi, b.hi)}; }
BATON_V16_BINOP(vadd, _mm256_add_ps)
BATON_V16_BINOP(vsub, _mm256_sub_ps)
BATON_V16_BINOP(vmul, _mm256_mul_ps)
BATON_V16_BINOP(vdiv, _mm256_div_ps)
BATON_V16_BINOP(vmax, _mm256_max_ps)
BATON_V16_BINOP(vmin, _mm256_min_ps)
#undef BATON_V16_BINOP

inline V16 vfma(V16 a, V16 b, V16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline V16 vround(V16 a) {
  constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return {_mm256_round_ps(a.lo, kMode), _mm256_round_ps(a.hi, kMode)};
}
inline __m256 pow2i_half(__m256 n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
inline V16 vpow2i(V16 n) { return {pow2i_half(n.lo), pow2i_half(n.hi)}; }

inline float vreduce_add(V16 a) {
  const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 0x1));
  return _mm_cvtss_f32(s1);
}
// Lane j = vreduce_add(a[j]), for 16 vectors at once.
inline V16 vreduce_add16(const V16* a) {
  alignas(32) float t[16];
  for (int j = 0; j < 16; ++j) t[j] = vreduce_add(a[j]);
  return vload(t);
}
inline float vreduce_max(V16 a) {
  alignas(32) float t[16];
  vstore(t, a);
  float m = t[0];
  for (int i = 1; i < 16; ++i) m = t[i] > m ? t[i] : m;
  return m;
}
