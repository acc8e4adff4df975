// The mixture-of-experts launchers (moe.cuh): routing (one warp per token), the stable grouping by
// expert (one warp for the whole batch: it is a few thousand pairs at most per step, and one warp
// needs no atomics or block-wide scans to stay deterministic), and the weighted combination.
#include <cfloat>
#include <climits>

#include "kernels/cuda/moe.cuh"

namespace baton::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kLanes = 32;
constexpr int kRouteWarps = 8;  // tokens per routing block
constexpr int kCombineThreads = 256;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Whether candidate (va, ea) beats (vb, eb): a real candidate beats none (e < 0), a larger logit
// wins, equal logits go to the lower expert.
__device__ __forceinline__ bool beats(float va, int ea, float vb, int eb) {
  if (ea < 0) return false;
  if (eb < 0) return true;
  return va > vb || (va == vb && ea < eb);
}

// One warp per token. Lane l owns experts l, l + 32, ..., and bit i of `taken` flags expert
// l + 32 i as already chosen.
__global__ void __launch_bounds__(kRouteWarps * kLanes)
    moe_route_kernel(RowsArg logits, int num_experts, int top_k, bool normalize, std::int32_t* expert_of,
                     float* weight_of) {
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const std::int64_t token = static_cast<std::int64_t>(blockIdx.x) * kRouteWarps + threadIdx.x / kLanes;
  if (token >= logits.count) return;  // the whole warp leaves together; no block barrier follows
  const float* l = row_ptr<const float>(logits, token);

  float max = -FLT_MAX;
  for (int e = lane; e < num_experts; e += kLanes) max = fmaxf(max, l[e]);
  max = warp_max(max);
  float sum = 0.0f;
  for (int e = lane; e < num_experts; e += kLanes) sum = __fadd_rn(sum, expf(l[e] - max));
  sum = warp_sum(sum);

  std::uint32_t taken = 0;
  float chosen_sum = 0.0f;  // lane 0's, in j order
  std::int32_t* experts = expert_of + token * top_k;
  float* weights = weight_of + token * top_k;
  for (int j = 0; j < top_k; ++j) {
    float best_v = 0.0f;
    int best_e = -1;
    for (int i = 0, e = lane; e < num_experts; ++i, e += kLanes) {
      if (!((taken >> i) & 1u) && beats(l[e], e, best_v, best_e)) best_v = l[e], best_e = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(kFullMask, best_v, o);
      const int e = __shfl_xor_sync(kFullMask, best_e, o);
      if (beats(v, e, best_v, best_e)) best_v = v, best_e = e;
    }
    // top_k <= num_experts, so some lane still had a candidate and best_e >= 0 on every lane.
    if (best_e % kLanes == lane) taken |= 1u << (best_e / kLanes);
    if (lane == 0) {
      const float w = __fdiv_rn(expf(best_v - max), sum);
      experts[j] = best_e;
      weights[j] = w;
      chosen_sum = __fadd_rn(chosen_sum, w);
    }
  }
  if (normalize && lane == 0) {
    for (int j = 0; j < top_k; ++j) weights[j] = __fdiv_rn(weights[j], chosen_sum);
  }
}

// One warp. count[e] and next[e] live in shared memory (2 x num_experts ints).
__global__ void __launch_bounds__(kLanes)
    moe_plan_kernel(const std::int32_t* expert_of, std::int64_t pairs, int top_k, int num_experts, int rows_per_tile,
                    std::int64_t max_tiles, std::int32_t* source, std::int32_t* row_of, GroupTile* tiles) {
  extern __shared__ std::int32_t counts[];
  std::int32_t* next = counts + num_experts;
  const int lane = static_cast<int>(threadIdx.x);
  const std::uint32_t below = (1u << lane) - 1u;
  for (int e = lane; e < num_experts; e += kLanes) counts[e] = 0;
  __syncwarp();

  // Counts: the lanes holding the same expert find each other; the lowest adds them all.
  for (std::int64_t base = 0; base < pairs; base += kLanes) {
    const std::int64_t p = base + lane;
    const int e = p < pairs ? expert_of[p] : -1;
    const std::uint32_t peers = __match_any_sync(kFullMask, e);
    if (e >= 0 && (peers & below) == 0) counts[e] += __popc(peers);
    __syncwarp();
  }

  // Starts and tiles: exclusive scans over the experts, 32 at a time.
  std::int64_t row_base = 0, tile_base = 0;
  for (int e0 = 0; e0 < num_experts; e0 += kLanes) {
    const int e = e0 + lane;
    const std::int32_t count = e < num_experts ? counts[e] : 0;
    const std::int32_t ntiles = (count + rows_per_tile - 1) / rows_per_tile;
    std::int32_t rows_incl = count, tiles_incl = ntiles;
#pragma unroll
    for (int o = 1; o < kLanes; o <<= 1) {
      const std::int32_t r = __shfl_up_sync(kFullMask, rows_incl, o);
      const std::int32_t t = __shfl_up_sync(kFullMask, tiles_incl, o);
      if (lane >= o) rows_incl += r, tiles_incl += t;
    }
    const std::int64_t start = row_base + rows_incl - count, first_tile = tile_base + tiles_incl - ntiles;
    if (e < num_experts) {
      next[e] = static_cast<std::int32_t>(start);
      for (std::int32_t i = 0; i < ntiles && first_tile + i < max_tiles; ++i) {
        GroupTile t;
        t.expert = e;
        t.begin = static_cast<std::int32_t>(start + static_cast<std::int64_t>(i) * rows_per_tile);
        t.end = static_cast<std::int32_t>(min(start + static_cast<std::int64_t>(i + 1) * rows_per_tile, start + count));
        tiles[first_tile + i] = t;
      }
    }
    row_base += __shfl_sync(kFullMask, rows_incl, kLanes - 1);
    tile_base += __shfl_sync(kFullMask, tiles_incl, kLanes - 1);
  }
  for (std::int64_t i = tile_base + lane; i < max_tiles; i += kLanes) tiles[i] = GroupTile{};
  __syncwarp();

  // Placement, stable: a pair's row is its expert's next free row plus its rank among the earlier
  // lanes with the same expert; the lowest of them then advances the expert's next row.
  for (std::int64_t base = 0; base < pairs; base += kLanes) {
    const std::int64_t p = base + lane;
    const int e = p < pairs ? expert_of[p] : -1;
    const std::uint32_t peers = __match_any_sync(kFullMask, e);
    if (e >= 0) {
      const std::int32_t row = next[e] + __popc(peers & below);
      source[row] = static_cast<std::int32_t>(p / top_k);
      row_of[p] = row;
    }
    __syncwarp();
    if (e >= 0 && (peers & below) == 0) next[e] += __popc(peers);
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kCombineThreads)
    moe_combine_kernel(RowsArg expert_out, const std::int32_t* row_of, const float* weight_of, int top_k,
                       RowsArg shared_out, RowsArg shared_logit, RowsArg out) {
  const std::int64_t total = out.count * out.cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / out.cols, c = i % out.cols;
    const std::int64_t pair0 = t * top_k;
    float v = __fmul_rn(weight_of[pair0], row_ptr<const float>(expert_out, row_of[pair0])[c]);
    for (int j = 1; j < top_k; ++j) {
      v = __fmaf_rn(weight_of[pair0 + j], row_ptr<const float>(expert_out, row_of[pair0 + j])[c], v);
    }
    if (shared_out.data != nullptr) {
      const float gate = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-row_ptr<const float>(shared_logit, t)[0])));
      v = __fmaf_rn(gate, row_ptr<const float>(shared_out, t)[c], v);
    }
    row_ptr<float>(out, t)[c] = v;
  }
}

}  // namespace

cudaError_t moe_route(const RowsArg& router_logits, int num_experts, int top_k, bool normalize,
                      std::int32_t* expert_of, float* weight_of, cudaStream_t stream) {
  if (router_logits.count == 0) return cudaSuccess;
  if (num_experts < 1 || num_experts > kMaxExperts || top_k < 1 || top_k > num_experts) return cudaErrorInvalidValue;
  const std::int64_t blocks = (router_logits.count + kRouteWarps - 1) / kRouteWarps;
  if (blocks > INT_MAX) return cudaErrorInvalidValue;
  moe_route_kernel<<<static_cast<unsigned>(blocks), kRouteWarps * kLanes, 0, stream>>>(
      router_logits, num_experts, top_k, normalize, expert_of, weight_of);
  return cudaGetLastError();
}

cudaError_t moe_plan(const std::int32_t* expert_of, std::int64_t pairs, int top_k, int num_experts,
                     int rows_per_tile, std::int64_t max_tiles, std::int32_t* source, std::int32_t* row_of,
                     GroupTile* tiles, cudaStream_t stream) {
  if (pairs == 0) return cudaSuccess;
  if (num_experts < 1 || num_experts > kMaxExperts || top_k < 1 || rows_per_tile < 1 || pairs > INT_MAX) {
    return cudaErrorInvalidValue;
  }
  const std::size_t shared = 2 * static_cast<std::size_t>(num_experts) * sizeof(std::int32_t);
  moe_plan_kernel<<<1, kLanes, shared, stream>>>(expert_of, pairs, top_k, num_experts, rows_per_tile, max_tiles,
                                                 source, row_of, tiles);
  return cudaGetLastError();
}

cudaError_t moe_combine(const RowsArg& expert_out, const std::int32_t* row_of, const float* weight_of, int top_k,
                        const RowsArg& shared_out, const RowsArg& shared_logit, const RowsArg& out,
                        cudaStream_t stream) {
  const std::int64_t total = out.count * out.cols;
  if (total == 0) return cudaSuccess;
  if (top_k < 1) return cudaErrorInvalidValue;
  moe_combine_kernel<<<grid_stride_blocks(total, kCombineThreads), kCombineThreads, 0, stream>>>(
      expert_out, row_of, weight_of, top_k, shared_out, shared_logit, out);
  return cudaGetLastError();
}

}  // namespace baton::cuda
