// The per-ISA CPU kernel table. Each tier (portable, AVX2, AVX-512) compiles the same templates
// (kernels_impl.h) over its own V16 and exports one KernelTable; CpuBackend picks a table at start-up
// and splits work across the thread pool. Every entry works on a caller-given sub-range so the
// backend decides partitioning, and every entry's per-row arithmetic is independent of that
// sub-range (batch invariance). Tiers are bit-identical to each other.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_weights.h"
#include "kernels/dtype.h"

namespace baton::cpu {

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for all m < rows and n in [n_begin, n_end).
struct GemmArgs {
  const float* x = nullptr;  // [rows, k], row stride ldx
  std::int64_t ldx = 0;
  const void* w = nullptr;   // [n, k] in w_dtype (F32, BF16 or F16), row stride ldw
  DType w_dtype = DType::kF32;
  std::int64_t ldw = 0;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [rows, n], row stride ldy
  std::int64_t ldy = 0;
  std::int64_t rows = 0;
  std::int64_t k = 0;
};

// y = x W^T (+ bias) for all rows and the output columns of panels [panel_begin, panel_end), W in
// the packed layout of packed_weights.h. Each output element is one fused multiply-add chain over
// k = 0, 1, ..., k - 1 in order (then + bias): the same for every row count and on every tier.
struct PackedGemmArgs {
  const float* x = nullptr;  // [rows, k], row stride ldx
  std::int64_t ldx = 0;
  const void* w = nullptr;   // packed panels (packed_weights.h), F32 or BF16
  DType w_dtype = DType::kBF16;
  std::int64_t n = 0;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [rows, n], row stride ldy
  std::int64_t ldy = 0;
  std::int64_t rows = 0;
  std::int64_t k = 0;
};

// Causal attention of each new token over its sequence's paged KV (keys at positions
// [max(0, pos - window + 1), pos]). One work item = (block of kAttentionTokenBlock consecutive
// tokens, kv head): it computes the num_heads / num_kv_heads query heads that share that kv head,
// for every token of the block (attention_items() counts the items).
struct AttentionArgs {
  const float* q = nullptr;  // [tokens, num_heads, head_dim], token stride q_stride, head stride head_dim
  std::int64_t q_stride = 0;
  const void* kv_cache = nullptr;  // one layer: [num_blocks, 2, block_size, num_kv_heads, head_dim]
  baton::DType kv_dtype = baton::DType::kF32;  // the cache's elements: F32 or BF16
  const std::int32_t* positions = nullptr;     // [tokens]
  const std::int32_t* token_seq = nullptr;     // [tokens] index of the token's sequence
  const std::int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride]
  std::int64_t block_table_stride = 0;
  float* out = nullptr;  // [tokens, num_heads, head_dim], token stride out_stride
  std::int64_t out_stride = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t block_size = 0;
  std::int32_t sliding_window = 0;  // 0: full causal attention
  float scale = 1.0f;
  std::int64_t num_tokens = 0;
};

// Tokens per attention work item: consecutive tokens of one sequence share key and value loads.
inline constexpr std::int64_t kAttentionTokenBlock = 8;
inline std::int64_t attention_items(std::int64_t num_tokens, std::int32_t num_kv_heads) {
  return (num_tokens + kAttentionTokenBlock - 1) / kAttentionTokenBlock * num_kv_heads;
}

struct KernelTable {
  const char* name;
  void (*gemm)(const GemmArgs& a, std::int64_t n_begin, std::int64_t n_end);
  // out = x * (1 / sqrt(mean(x^2) + eps)) * w over one row of length dim (out may alias x).
  void (*rms_norm_row)(const float* x, const float* w, float eps, float* out, std::int64_t dim);
  // out[i] = silu(gate[i]) * up[i].
  void (*silu_mul_row)(const float* gate, const float* up, float* out, std::int64_t n);
  // items [begin, end) of token_block * num_kv_heads + kv_head. scratch: attention_scratch_floats().
  void (*attention)(const AttentionArgs& a, std::int64_t item_begin, std::int64_t item_end,
                    float* scratch);
  // Canonical dot product (the GEMM's per-element order); exposed for tests and the sampler.
  float (*dot)(const float* a, const float* b, std::int64_t n);
  // x[i] = exp(x[i]) with the kernels' own exp (about 1 ulp, identical on every tier).
  void (*exp_inplace)(float* x, std::int64_t n);
  // The register-blocked GEMM over packed weights (see PackedGemmArgs).
  void (*gemm_packed)(const PackedGemmArgs& a, std::int64_t panel_begin, std::int64_t panel_end);
};

// Floats of scratch one attention call needs for the given shape and longest context.
inline std::int64_t attention_scratch_floats(std::int32_t num_heads, std::int32_t num_kv_heads,
                                             std::int32_t head_dim, std::int64_t max_context) {
  (void)head_dim;
  const std::int64_t group = num_heads / num_kv_heads;
  // Scores [tokens, group, context rounded up to 16], then key and value row pointers (two floats
  // each) for the context rounded up to 16, plus 16 spare.
  return kAttentionTokenBlock * group * (max_context + 16) + 4 * (max_context + 32);
}

const KernelTable& portable_kernel_table();
const KernelTable& avx2_kernel_table();
const KernelTable& avx512_kernel_table();
// AVX-512 with BF16 dot products for BF16-weight GEMMs (activations rounded to BF16; opt-in).
const KernelTable& avx512_bf16_kernel_table();

}  // namespace baton::cpu
