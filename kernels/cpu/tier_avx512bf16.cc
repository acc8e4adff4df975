// The opt-in "avx512bf16" tier: the AVX-512 kernels, except that GEMMs over BF16 weights round the
// activations to BF16 and multiply with VDPBF16PS (32 products per instruction, weights used
// straight from memory, packed or row-major). Rows stay batch-invariant (fixed order per row), but results differ from
// the exact-f32 tiers, so "auto" never picks this tier; --cpu-isa avx512bf16 does. Compiled with
// -mavx512bf16 (kernels/CMakeLists.txt); called only when cpuid reports AVX512_BF16.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/dtype.h"

namespace baton::cpu {
namespace tier_avx512bf16 {
namespace {
#include "kernels/cpu/simd16_avx512.h"
#include "kernels/cpu/kernels_impl.h"

// x rounded to BF16 (nearest even), zero-padded to a multiple of 32.
void pack_bf16(const float* x, std::int64_t k, std::uint16_t* out) {
  const std::int64_t padded = (k + 31) / 32 * 32;
  for (std::int64_t i = 0; i < padded; ++i) out[i] = i < k ? baton::f32_to_bf16(x[i]) : 0;
}

// y[m][n] = sum over 32-element chunks of VDPBF16PS(x_bf16, w_bf16), one accumulator per output;
// lane l takes elements 2l and 2l+1 of each chunk, then vreduce_add's fixed tree.
template <int MR, int NR>
void tile_dot(const std::uint16_t* xp, std::int64_t ldxp, const std::uint16_t* w, std::int64_t ldw, const float* bias,
              float* y, std::int64_t ldy, std::int64_t k) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  for (std::int64_t kk = 0; kk < k; kk += 32) {
    __m512bh wv[NR];
    const int n = static_cast<int>(std::min<std::int64_t>(32, k - kk));
    const __mmask32 mask = n >= 32 ? 0xffffffffu : static_cast<__mmask32>((1ull << n) - 1);
    for (int j = 0; j < NR; ++j) {
      __builtin_prefetch(w + (j + NR) * ldw + kk);
      wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + j * ldw + kk);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xp + i * ldxp + kk);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float s = vreduce_add(V16{acc[i][j]});
      y[i * ldy + j] = bias != nullptr ? s + bias[j] : s;
    }
  }
}

template <int MRMax, int NRMax>
void tile_dot_dyn(const std::uint16_t* xp, std::int64_t ldxp, const std::uint16_t* w, std::int64_t ldw,
                  const float* bias, float* y, std::int64_t ldy, std::int64_t k, int mr, int nr) {
  if constexpr (MRMax > 0 && NRMax > 0) {
    if (mr < MRMax) {
      tile_dot_dyn<MRMax - 1, NRMax>(xp, ldxp, w, ldw, bias, y, ldy, k, mr, nr);
    } else if (nr < NRMax) {
      tile_dot_dyn<MRMax, NRMax - 1>(xp, ldxp, w, ldw, bias, y, ldy, k, mr, nr);
    } else {
      tile_dot<MRMax, NRMax>(xp, ldxp, w, ldw, bias, y, ldy, k);
    }
  }
}

void gemm_bf16_dot(const GemmArgs& a, std::int64_t n_begin, std::int64_t n_end) {
  if (a.w_dtype != baton::DType::kBF16) {
    gemm(a, n_begin, n_end);  // exact f32 paths for F32 and F16 weights
    return;
  }
  thread_local std::vector<std::uint16_t> packed;
  const std::int64_t ldxp = (a.k + 31) / 32 * 32;
  if (static_cast<std::int64_t>(packed.size()) < a.rows * ldxp) packed.resize(static_cast<std::size_t>(a.rows * ldxp));
  for (std::int64_t m = 0; m < a.rows; ++m) pack_bf16(a.x + m * a.ldx, a.k, packed.data() + m * ldxp);
  over_tiles(a, n_begin, n_end, packed.data(), ldxp, static_cast<const std::uint16_t*>(a.w),
             [&](const std::uint16_t* x, const std::uint16_t* w, const float* bias, float* y, int mr, int nr) {
               tile_dot_dyn<kGemmMaxRows, kGemmMaxCols>(x, ldxp, w, a.ldw, bias, y, a.ldy, a.k, mr, nr);
             });
}

// ---- The same over packed BF16 panels (packed_weights.h) ----------------------------------------
// A panel's k-pair q is 16 dwords, dword l = (W[c_l][2q], W[c_l][2q + 1]): exactly VDPBF16PS's
// pair layout. Broadcasting the row's (x[2q], x[2q + 1]) dword makes one instruction do both k's
// of 16 columns, with no widening of the weights. Output element (m, c) is one chain: acc = 0, then
// acc = dpbf16(acc, x pair q, W pair q) for q = 0, 1, ... in order (+ bias): independent of the
// row tile, the rows riding along, the k blocking (exact f32 partial sums wait in y) and threads.

// Rows [0, MR) of xb (BF16, row stride ldxb, zero past k) times panels [0, NP) over `pairs`
// k-pairs; xb and w already point at the block's first k (even). resume/finish as packed_tile.
template <int MR, int NP>
void packed_tile_dot(const std::uint16_t* xb, std::int64_t ldxb, const std::uint16_t* w, std::int64_t ps,
                     std::int64_t pairs, const float* bias, float* y, std::int64_t ldy, int last_cols, bool resume,
                     bool finish, std::int64_t ahead) {
  __m512 acc[MR][NP];
  for (int j = 0; j < NP; ++j) {
    const __mmask16 cols = j == NP - 1 ? static_cast<__mmask16>((1u << last_cols) - 1) : __mmask16{0xffff};
    for (int i = 0; i < MR; ++i) acc[i][j] = resume ? _mm512_maskz_loadu_ps(cols, y + i * ldy + j * 16) : _mm512_setzero_ps();
  }
  const std::int64_t wrap_from = packed_prefetch_wrap_from(pairs, ahead, finish);
  for (std::int64_t q = 0; q < pairs; ++q) {
    __m512bh wv[NP];
    const std::int64_t wrap = q < wrap_from ? 0 : (NP - 1) * ps;
    for (int j = 0; j < NP; ++j) {
      if (ahead > 0) __builtin_prefetch(w + wrap + j * ps + (q + ahead) * 32);
      wv[j] = (__m512bh)_mm512_loadu_si512(w + j * ps + q * 32);
    }
    for (int i = 0; i < MR; ++i) {
      std::uint32_t pair;
      std::memcpy(&pair, xb + i * ldxb + 2 * q, sizeof(pair));
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  for (int j = 0; j < NP; ++j) {
    const __mmask16 cols = j == NP - 1 ? static_cast<__mmask16>((1u << last_cols) - 1) : __mmask16{0xffff};
    const __m512 b = finish && bias != nullptr ? _mm512_maskz_loadu_ps(cols, bias + j * 16) : _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      const __m512 r = finish && bias != nullptr ? _mm512_add_ps(acc[i][j], b) : acc[i][j];
      _mm512_mask_storeu_ps(y + i * ldy + j * 16, cols, r);
    }
  }
}

template <int MRMax, int NPMax>
void packed_tile_dot_dyn(const std::uint16_t* xb, std::int64_t ldxb, const std::uint16_t* w, std::int64_t ps,
                         std::int64_t pairs, const float* bias, float* y, std::int64_t ldy, int last_cols,
                         bool resume, bool finish, std::int64_t ahead, int mr, int np) {
  if constexpr (MRMax > 0 && NPMax > 0) {
    if (mr < MRMax) {
      packed_tile_dot_dyn<MRMax - 1, NPMax>(xb, ldxb, w, ps, pairs, bias, y, ldy, last_cols, resume, finish, ahead,
                                            mr, np);
    } else if (np < NPMax) {
      packed_tile_dot_dyn<MRMax, NPMax - 1>(xb, ldxb, w, ps, pairs, bias, y, ldy, last_cols, resume, finish, ahead,
                                            mr, np);
    } else {
      packed_tile_dot<MRMax, NPMax>(xb, ldxb, w, ps, pairs, bias, y, ldy, last_cols, resume, finish, ahead);
    }
  }
}

// The exact path's loop nest (for_each_packed_tile) over x rounded to BF16 once per call (k
// padded to even with zeros). F32 weights keep the exact path.
void gemm_packed_bf16_dot(const PackedGemmArgs& a, std::int64_t panel_begin, std::int64_t panel_end) {
  if (a.w_dtype != baton::DType::kBF16) {
    gemm_packed(a, panel_begin, panel_end);
    return;
  }
  thread_local std::vector<std::uint16_t> xb;
  const std::int64_t ldxb = baton::cpu::packed_k(a.k);
  if (static_cast<std::int64_t>(xb.size()) < a.rows * ldxb) xb.resize(static_cast<std::size_t>(a.rows * ldxb));
  for (std::int64_t m = 0; m < a.rows; ++m) {
    std::uint16_t* row = xb.data() + m * ldxb;
    for (std::int64_t i = 0; i < a.k; ++i) row[i] = baton::f32_to_bf16(a.x[m * a.ldx + i]);
    if (ldxb > a.k) row[a.k] = 0;
  }
  const auto* w = static_cast<const std::uint16_t*>(a.w);
  const std::int64_t ps = baton::cpu::panel_elements(a.k);
  // Tiles of kPackedPanels panels whatever the row count: wider ones for one or two rows, as the
  // exact tiers take, measured no faster here.
  for_each_packed_tile(a, ldxb, packed_block_k(2), kPackedPanels, panel_begin, panel_end,
                       [&](std::int64_t m, int mr, std::int64_t p, int np, std::int64_t k0, std::int64_t kb,
                           int last_cols, const float* bias, bool resume, bool finish, std::int64_t ahead) {
                         packed_tile_dot_dyn<kPackedRows, kPackedPanels>(
                             xb.data() + m * ldxb + k0, ldxb, w + p * ps + k0 * 16, ps, kb / 2, bias,
                             a.y + m * a.ldy + p * 16, a.ldy, last_cols, resume, finish, ahead, mr, np);
                       });
}

}  // namespace
}  // namespace tier_avx512bf16

const KernelTable& avx512_bf16_kernel_table() {
  static const KernelTable table = [] {
    KernelTable t = tier_avx512bf16::make_table_with_gemm("avx512bf16", &tier_avx512bf16::gemm_bf16_dot);
    t.gemm_packed = &tier_avx512bf16::gemm_packed_bf16_dot;
    return t;
  }();
  return table;
}

}  // namespace baton::cpu
