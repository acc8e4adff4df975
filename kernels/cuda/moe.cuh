// The mixture-of-experts launchers around the grouped linear (gemm.cuh: linear_grouped): routing,
// the device-side grouping of (token, expert) pairs by expert, and the weighted combination.
// Semantics are the CPU twin's (kernels/cpu/moe.cc; kernels/backend.h documents them).
//
// Everything stays on the device: the host launches a fixed sequence whose sizes depend only on
// the token count, the expert count and top_k, so a step with experts is one CUDA graph like any
// other and nothing synchronises. Each token is routed by one warp from its own logits, grouping is
// a stable counting sort (tokens in order within an expert), and a token's output is the sum of
// its experts' rows in its top_k order: no result depends on which other tokens share the batch.
//
// Must not: use atomics whose order reaches a result, or read anything on the host.
#pragma once

#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

// Experts a routing warp can track (32 lanes x 32 bits of "already chosen" flags).
inline constexpr int kMaxExperts = 1024;

// Per token t (router_logits rows, F32 [tokens, num_experts]): p = softmax(logits[t]); its top_k
// experts by logit, largest first, ties to the lower index, into expert_of[t * top_k + j], and
// their probabilities (divided by their sum when `normalize`) into weight_of[...].
cudaError_t moe_route(const RowsArg& router_logits, int num_experts, int top_k, bool normalize,
                      std::int32_t* expert_of, float* weight_of, cudaStream_t stream);

// Groups the `pairs` (token, j) pairs by expert, stable: grouped row r holds pair source_pair(r),
// expert e's rows are [start_e, start_e + count_e) in token order, experts in index order.
// Writes source[r] (the pair's token, for gathering x), row_of[pair] (for combining) and the
// tiles: each expert's rows cut into runs of at most rows_per_tile, experts in order, then
// expert = -1 up to max_tiles (which must be at least ceil((pairs + (rows_per_tile - 1) *
// min(num_experts, pairs)) / rows_per_tile)).
cudaError_t moe_plan(const std::int32_t* expert_of, std::int64_t pairs, int top_k, int num_experts,
                     int rows_per_tile, std::int64_t max_tiles, std::int32_t* source, std::int32_t* row_of,
                     GroupTile* tiles, cudaStream_t stream);

// out[t] = sum over j in order of weight_of[t k + j] * expert_out[row_of[t k + j]] (the first term
// a product, each later one an fmaf), then, when shared_out.data is set, + sigmoid(shared_logit[t])
// * shared_out[t] (one more fmaf). out may alias the layer's input (all reads of it are earlier on
// the stream).
cudaError_t moe_combine(const RowsArg& expert_out, const std::int32_t* row_of, const float* weight_of, int top_k,
                        const RowsArg& shared_out, const RowsArg& shared_logit, const RowsArg& out,
                        cudaStream_t stream);

}  // namespace baton::cuda
