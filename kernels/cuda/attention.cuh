// Paged attention on CUDA: storing new keys/values into the block cache, and causal attention of
// each new token over its sequence's cached context (decode: one query per sequence; prefill and
// verification: several, causal among themselves). Semantics are the CPU twins'
// (Backend::write_kv / paged_attention in kernels/backend.h). F32 keys, values, queries and outputs;
// the cache F32 or BF16 (KvCacheArg::type); head_dim even and <= 256.
// The launchers must not allocate (the caller lends the split mode's workspace), synchronize with
// the host or let a token's result depend on which other tokens share the call (batch-invariant;
// see attention.cu: split and whole mode give the same bits).
#pragma once

#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

// Stores k[t], v[t] at slot_mapping[t] (= block * block_size + offset); a negative slot skips t.
// k, v: [tokens, kv_heads, head_dim] (any row and head strides); slot_mapping: [tokens] I32.
cudaError_t write_kv(HeadsArg k, HeadsArg v, const std::int32_t* slot_mapping, KvCacheArg cache,
                     cudaStream_t stream);

struct AttentionArgs {
  HeadsArg q;                                // [tokens, heads, head_dim]
  KvCacheArg cache;                          // written by write_kv first
  const std::int32_t* positions = nullptr;   // [tokens] absolute position of each query
  const std::int32_t* token_seq = nullptr;   // [tokens] index of each token's sequence
  const std::int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  std::int64_t num_seqs = 0;                 // rows of block_tables (only picks the work split, never the result)
  std::int64_t max_blocks_per_seq = 0;       // row stride of block_tables (elements)
  std::int64_t max_context_len = 0;          // longest (position + 1) in the call
  float scale = 1.0f;
  int sliding_window = 0;                    // 0 = none; else attend to the last `sliding_window` positions
  HeadsArg out;                              // [tokens, heads, head_dim]
  // Scratch for split mode (a small decode batch spread over the SMs): used when it holds
  // tokens x heads x ceil(max_context_len / 256) x (head_dim + 2) floats; null for never. It must
  // not be in use by other work on the stream.
  float* workspace = nullptr;
  std::int64_t workspace_floats = 0;
};

// Token t attends to positions [max(0, positions[t] + 1 - window), positions[t]] of its sequence.
cudaError_t paged_attention(const AttentionArgs& args, cudaStream_t stream);

}  // namespace baton::cuda
