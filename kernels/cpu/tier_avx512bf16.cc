// The opt-in "avx512bf16" tier: the AVX-512 kernels, except that GEMMs over BF16 weights round the
// activations to BF16 and multiply with VDPBF16PS (32 products per instruction, weights used
// straight from memory). Rows stay batch-invariant (fixed order per row), but results differ from
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

}  // namespace
}  // namespace tier_avx512bf16

const KernelTable& avx512_bf16_kernel_table() {
  static const KernelTable table = tier_avx512bf16::make_table_with_gemm("avx512bf16", &tier_avx512bf16::gemm_bf16_dot);
  return table;
}

}  // namespace baton::cpu
