// V16 on AVX-512: one zmm register. See simd16_portable.h for the contract every tier implements.
// Include only from a translation unit compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq.
#pragma once

#include <immintrin.h>

#include <cstdint>

struct V16 {
  __m512 v;
};

constexpr int kGemmMaxRows = 4;  // MR: rows of x per GEMM tile
constexpr int kGemmMaxCols = 4;  // NR: rows of W (output columns) per GEMM tile
constexpr int kPackedRows = 8;    // packed GEMM: rows of x per register tile
constexpr int kPackedPanels = 3;  // packed GEMM: 16-column weight panels per register tile
constexpr int kPackedPanelsOneRow = 4;   // packed GEMM: panels per tile for calls of one row
constexpr int kPackedPanelsTwoRows = 5;  // ... and of two rows (gemm_packed_kernels.h)
constexpr int kPackedFewRows = 5;        // packed GEMM: calls of 3 to kPackedFewRows rows take
constexpr int kPackedPanelsFewRows = 4;  // ... this many panels per tile
constexpr bool kAttentionWideScores = true;  // attention scores 16 keys at a time (vreduce_add16)
constexpr int kAttentionValueRegs = 8;       // attention: V16 accumulators per head-dim chunk
constexpr int kAttentionValueRows = 4;     // attention: rows whose value sums share the value loads
constexpr int kAttentionRowValueRegs = 4;  // ... and V16 accumulators per row in such a pass

inline __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }

inline V16 vzero() { return {_mm512_setzero_ps()}; }
inline V16 vset1(float a) { return {_mm512_set1_ps(a)}; }
inline V16 vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V16 vload_n(const float* p, int n) { return {_mm512_maskz_loadu_ps(tail_mask(n), p)}; }
inline V16 vload_bf16(const std::uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline V16 vload_bf16_n(const std::uint16_t* p, int n) {
  const __m256i h = _mm256_maskz_loadu_epi16(tail_mask(n), p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
// 32 BF16 values in pair order: even[l] = p[2l], odd[l] = p[2l + 1]. One load, one shift and one
// mask: the 32-bit word l holds the pair, low half first.
inline void vload_bf16_pairs(const std::uint16_t* p, V16& even, V16& odd) {
  const __m512i w = _mm512_loadu_si512(p);
  even.v = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  odd.v = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline void vload_bf16_pairs_n(const std::uint16_t* p, int n, V16& even, V16& odd) {
  const __m512i w = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((n >= 32 ? 0xffffffffull : (1ull << n) - 1)), p);
  even.v = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  odd.v = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline V16 vload_f16(const std::uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline V16 vload_f16_n(const std::uint16_t* p, int n) {
  return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p))};
}
inline void vstore(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
inline void vstore_n(float* p, V16 a, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), a.v); }

inline V16 vfma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline V16 vadd(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V16 vsub(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V16 vmul(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 vdiv(V16 a, V16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline V16 vmax(V16 a, V16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline V16 vmin(V16 a, V16 b) { return {_mm512_min_ps(a.v, b.v)}; }
inline V16 vround(V16 a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// 2^n for integer-valued n in [-126, 127].
inline V16 vpow2i(V16 n) {
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}

// The fixed reduction tree: lanes (i, i+8), then (i, i+4), (i, i+2), (i, i+1).
inline float vreduce_add(V16 a) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a.v), _mm512_extractf32x8_ps(a.v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 0x1));
  return _mm_cvtss_f32(s1);
}
// Lane j = vreduce_add(a[j]) bit for bit, for 16 vectors at once: every add below adds the same two
// partial sums as vreduce_add's tree does (float addition commutes exactly), four vectors' worth
// per instruction instead of one.
inline V16 vreduce_add16(const V16* a) {
  __m512 b[8];  // b[i]: lanes 0-7 the (l, l+8) sums of a[2i], lanes 8-15 those of a[2i+1]
  for (int i = 0; i < 8; ++i) {
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i].v, a[2 * i + 1].v, 0x44),
                         _mm512_shuffle_f32x4(a[2 * i].v, a[2 * i + 1].v, 0xEE));
  }
  __m512 c[4];  // c[m]: 128-bit quarter q holds the (l, l+4) sums of a[4m + q]
  for (int m = 0; m < 4; ++m) {
    c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0xDD));
  }
  __m512 d[2];  // d[n]: quarter q holds the (l, l+2) sums of a[8n + q], then of a[8n + 4 + q]
  for (int n = 0; n < 2; ++n) {
    d[n] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * n], c[2 * n + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(c[2 * n], c[2 * n + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Lane 4q + r: the total of a[q + 4r]; the permutation puts a[j]'s total in lane j.
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return {_mm512_permutexvar_ps(order, e)};
}
inline float vreduce_max(V16 a) { return _mm512_reduce_max_ps(a.v); }
