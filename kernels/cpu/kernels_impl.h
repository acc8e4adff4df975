// The CPU kernels, written once over V16 and compiled per ISA tier: this file gathers them (by op:
// gemm_kernels.h, activation_kernels.h, rms_norm_kernels.h, paged_attention_kernels.h) and builds
// the tier's KernelTable. RoPE, embedding, add and the KV writes have no reductions and live in
// elementwise.cc (one copy for all tiers).
//
// Include this file inside a tier's own namespace, after that tier's simd16_*.h; it must not be
// included anywhere else (each tier's copy is compiled with different instruction-set flags, and
// the per-tier namespace keeps the linker from merging them).
//
// Numerical contract (what makes rows batch-invariant and tiers bit-identical): every reduction
// of a row uses 16 lanes, lane l accumulating the elements l, l+16, l+32, ... with fused
// multiply-adds in increasing index order, a zero-filled partial chunk at the end, then
// vreduce_add's fixed tree. GEMMs over BF16 weights use "pair order" instead, which SIMD tiers
// widen more cheaply: per 32 elements, lane l takes element 2l then element 2l+1. Nothing depends
// on how many rows share a call or on the thread count.

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/gemm_packed_kernels.h"
#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/rms_norm_kernels.h"
#include "kernels/cpu/paged_attention_kernels.h"

// The table this tier exports.
inline const baton::cpu::KernelTable& make_table(const char* name) {
  static const baton::cpu::KernelTable table{name, &gemm, &rms_norm_row, &silu_mul_row,
                                             &attention, &dot, &exp_inplace, &gemm_packed};
  return table;
}

// The same table with another GEMM (a tier that only changes how some GEMMs are computed).
inline baton::cpu::KernelTable make_table_with_gemm(const char* name,
                                                    void (*gemm_fn)(const baton::cpu::GemmArgs&, std::int64_t,
                                                                    std::int64_t)) {
  return baton::cpu::KernelTable{name, gemm_fn, &rms_norm_row, &silu_mul_row, &attention, &dot, &exp_inplace,
                                 &gemm_packed};
}
