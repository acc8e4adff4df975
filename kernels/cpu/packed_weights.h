// The packed layout of linear() weights that the register-blocked GEMM (gemm_packed_kernels.h)
// streams, and the packing done once at model load (CpuBackend::pack_linear_weight).
//
// A weight W [n, k] (F32 or BF16, row-major) becomes ceil(n / 16) panels of 16 output columns.
// Panel p holds columns 16p .. 16p + 15 for every k, in k-pairs: pair q (k = 2q, 2q + 1) is 32
// elements,
//   BF16: element 2l + e = W[16p + l][2q + e]   (32-bit word l holds column l's pair, low half first,
//         so one 64-byte load widens to both k's with a shift and a mask: vload_bf16_pairs)
//   F32:  element 16e + l = W[16p + l][2q + e]  (two 64-byte loads)
// for l < 16, e < 2. k is padded to even and n to a multiple of 16 with zeros. Panel p starts at
// element p * panel_elements(k). Nothing here depends on the ISA tier: every tier reads one layout.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace baton::cpu {

inline constexpr int kPanelCols = 16;

inline std::int64_t packed_k(std::int64_t k) { return (k + 1) / 2 * 2; }
inline std::int64_t num_panels(std::int64_t n) { return (n + kPanelCols - 1) / kPanelCols; }
inline std::int64_t panel_elements(std::int64_t k) { return packed_k(k) * kPanelCols; }
inline std::int64_t packed_weight_bytes(DType dtype, std::int64_t n, std::int64_t k) {
  return num_panels(n) * panel_elements(k) * static_cast<std::int64_t>(dtype_size(dtype));
}
// Weights this layout exists for (others stay row-major and use the dot-product GEMM).
inline bool packable_weight_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16; }

// Packs w [n, k] (row stride ldw elements, dtype F32 or BF16) into out (packed_weight_bytes).
void pack_weight(const void* w, DType dtype, std::int64_t n, std::int64_t k, std::int64_t ldw, void* out);

}  // namespace baton::cpu
