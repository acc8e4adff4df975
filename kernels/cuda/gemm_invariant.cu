// The batch-invariant linear() kernel: y[r, c] = sum_i x[r, i] * w[c, i] (+ bias[c]), F32
// activations, F32/BF16/F16 weights, F32 accumulation (gemm_internal.cuh: linear_invariant).
//
// The reduction order. Every output element is computed by one warp as follows, and by nothing
// else; the order depends on k alone (never on m, on the row, on the other rows of the call, on
// alignment or strides, or on which template instance runs):
//   - k is cut into 8-element chunks, chunk j = elements [8j, 8j + 8) (the last one may be short);
//   - lane l (0..31) owns chunks j = l, l + 32, l + 64, ... and, starting from +0.0f, folds them in
//     increasing j, each chunk's elements in increasing index, with one fused multiply-add per
//     element: acc = fmaf(x[i], w[i], acc);
//   - the 32 lane sums are combined by an xor-butterfly (offsets 16, 8, 4, 2, 1; each step
//     v = v + shfl_xor(v, offset), so every lane ends with the same value);
//   - the bias, if any, is added last (one rounding).
// Rows are independent accumulators in registers, so a row's bits do not depend on the rows that
// share its call: a token's logits are the same in decode, in a (k+1)-token verification and in
// prefill. tests/kernels/cuda/gemm_test.cc replays this order on the host and compares bits.
//
// The layout, for bandwidth. A block is 8 warps; each warp owns 4 consecutive output columns (4
// weight rows) and R activation rows (R = 1, 2, 4 or 8 by m; more rows are tiled over blockIdx.x,
// the fastest-varying grid index, so the blocks that share a weight slice run together and the
// repeat reads hit L2). Weights stream straight from global memory into registers as 128-bit loads
// (8 BF16/F16 or 2 x 4 F32 per lane per chunk, 512 contiguous bytes per warp per load
// instruction), in groups of U chunks per lane per column double-buffered in registers: the next
// group's loads are issued before the current group's FMAs (2 x U x 4 x 16 bytes per lane, i.e.
// 4-8 KiB per warp, in flight for 16-bit weights at R <= 2). Every weight element is read once per
// row tile, so from DRAM once per call for m <= 8 (and, for larger m, once plus L2 re-reads by the
// sibling row tiles running alongside). x is staged in shared memory in k-slabs (8192 / R elements
// per row), split into low and high half-chunks so each lane's two 16-byte shared loads are
// conflict-free; the slab's first weight group is issued before the staging so the two overlap.
// Unaligned weights (base or row stride not a multiple of 16 bytes) take a scalar-load instance of
// the same kernel; arithmetic identical. Why this should stream at >= 80% of copy bandwidth at
// m = 1: 2 blocks x 8 warps per SM (<= 128 registers), each warp with 4-8 KiB of loads in flight,
// i.e. >= 4 MiB device-wide even for n = 4096 (1024 warps), above the ~3 MiB that HBM3e's
// bandwidth x latency needs; the FMA/convert/shared-load work is ~15% of the issue slots at m = 1.
//
// Grouped launches (linear_grouped, for mixture-of-experts layers) run the same kernel over a tile
// table instead of consecutive row tiles: block x takes tile x's rows and its expert's weight, and
// an unused tile's block returns at once. Nothing else changes, so a row's bits are those of
// linear() of that row alone with its expert's weight.
//
// Must not: change the order above for any case (including tails, unaligned data, partial tiles);
// use atomics or split-k across warps/blocks; let a thread skip a __syncthreads or a shuffle.
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/gemm_internal.cuh"

namespace baton::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kLanes = 32;
constexpr int kThreads = kWarps * kLanes;
constexpr int kColsPerWarp = 4;
constexpr int kColsPerBlock = kWarps * kColsPerWarp;  // 32 output columns per block
constexpr int kChunk = 8;                              // k elements per lane per step
constexpr int kXSlabFloats = 8192;                     // x staging: R rows x (8192 / R) elements
constexpr std::int64_t kMaxGridY = 65535;

// How a weight dtype's 8-element chunk sits in 32-bit registers.
template <WeightType W>
struct Traits;

template <>
struct Traits<WeightType::kF32> {
  using Elem = float;
  static constexpr int kWords = 8;  // one element per word
  __device__ static void put(std::uint32_t* v, int t, Elem e) { v[t] = __float_as_uint(e); }
  __device__ static float get(const std::uint32_t* v, int t) { return __uint_as_float(v[t]); }
  __device__ static void load_vec(const Elem* p, std::uint32_t* v) {
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
    const uint4 b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
};

// 16-bit types: element t is the low (even t) or high (odd t) half of word t / 2 (little-endian).
struct Half16 {
  using Elem = std::uint16_t;
  static constexpr int kWords = 4;
  __device__ static void put(std::uint32_t* v, int t, Elem e) {
    v[t >> 1] |= static_cast<std::uint32_t>(e) << (16 * (t & 1));
  }
  __device__ static std::uint32_t half_bits(const std::uint32_t* v, int t) {
    return (t & 1) ? (v[t >> 1] >> 16) : (v[t >> 1] & 0xffffu);
  }
  __device__ static void load_vec(const Elem* p, std::uint32_t* v) {
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  }
};

template <>
struct Traits<WeightType::kBF16> : Half16 {
  // BF16 -> F32 is exact: the bits are the high half of the float.
  __device__ static float get(const std::uint32_t* v, int t) {
    return __uint_as_float((t & 1) ? (v[t >> 1] & 0xffff0000u) : (v[t >> 1] << 16));
  }
};

template <>
struct Traits<WeightType::kF16> : Half16 {
  // F16 -> F32 is exact.
  __device__ static float get(const std::uint32_t* v, int t) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(half_bits(v, t))));
  }
};

// Chunks per lane per column in one load group. Two groups are in flight per warp (ping-pong
// buffers: the next group's loads go out before the current group's FMAs), so the raw weight
// registers per lane are 2 * U * kColsPerWarp * kWords: 64 for 16-bit weights at R <= 2 (decode:
// bytes in flight are what counts), 32 at R >= 4 (the R x 4 accumulators need the registers), 64
// for F32 weights. Only the grouping of loads depends on U; the per-lane chunk order does not.
template <WeightType W, int R>
constexpr int kGroupChunks = (Traits<W>::kWords == 4 && R <= 2) ? 2 : 1;

struct InvariantArgs {
  const float* x;      // [m, k] F32, rows ldx apart
  std::int64_t ldx;    // elements
  const void* w;       // [n, k] of the weight dtype, rows ldw apart
  std::int64_t ldw;    // elements
  const float* bias;   // [n] F32 or null
  float* y;            // [m, n] F32, rows ldy apart; must not overlap x
  std::int64_t ldy;    // elements
  std::int64_t m, n, k;
  std::int64_t col_block0;  // column block of blockIdx.y == 0 (launches split at 65535 blocks)
  bool x_vec;               // x and ldx allow 16-byte loads of x
  // Grouped (mixture-of-experts) launches: tile blockIdx.x names its rows and its expert's weight
  // (w is then unused). Null: row tile blockIdx.x is rows [R x, R x + R) of m, weight w.
  const GroupTile* tiles;
  const void* const* expert_w;
};

// Where element e (0 <= e < KS) of a staged x row lives in shared memory: element 8j + t of chunk
// j is at lo[4j + t] for t < 4 and at hi[4j + t - 4] otherwise, hi starting kHiOffset floats
// after lo. A lane then reads its chunk as two float4 at lo + 4j and hi + 4j: consecutive lanes,
// consecutive 16 bytes, no bank conflicts. The 16-float pad puts lo and hi of the same quad on
// different banks for the staging stores.
template <int KS>
struct XLayout {
  static constexpr int kHiOffset = KS / 2 + 16;
  static constexpr int kRowStride = KS + 32;  // floats; a multiple of 4 (16-byte aligned rows)
  __device__ static int index(int e) { return ((e >> 2) & 1) * kHiOffset + (e >> 3) * 4 + (e & 3); }
};

// Copies x[row0 .. row0 + R) [s0, s0 + len) into xs (XLayout), zeros for rows >= row_end. Every
// thread of the block calls it; it has no barrier of its own.
template <int R, int KS>
__device__ __forceinline__ void stage_x(float* xs, const InvariantArgs& a, std::int64_t row0, std::int64_t row_end,
                                        std::int64_t s0, int len) {
  using L = XLayout<KS>;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float* dst = xs + r * L::kRowStride;
    const std::int64_t row = row0 + r;
    if (row >= row_end) {
      for (int e = threadIdx.x; e < len; e += kThreads) dst[L::index(e)] = 0.0f;
      continue;
    }
    const float* src = a.x + row * a.ldx + s0;
    int e0 = 0;
    if (a.x_vec) {
      // src is 16-byte aligned: x and ldx allow it and s0 is a multiple of 8.
      const int quads = len / 4;
      for (int q = threadIdx.x; q < quads; q += kThreads) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(src) + q);
        // quad q = elements 4q..4q+3 = half (q & 1) of chunk q / 2.
        *reinterpret_cast<float4*>(dst + (q & 1) * L::kHiOffset + (q >> 1) * 4) = v;
      }
      e0 = quads * 4;
    }
    for (int e = e0 + threadIdx.x; e < len; e += kThreads) dst[L::index(e)] = __ldg(src + e);
  }
}

// Loads chunk j (elements 8j .. 8j + count) of each of the warp's weight rows into raw; count < 8
// only for the short last chunk (and 0 past the end), whose missing elements read as zero bits.
template <WeightType W, bool kVecW>
__device__ __forceinline__ void load_chunk(const typename Traits<W>::Elem* row, std::int64_t j, int count,
                                           std::uint32_t* raw) {
  using T = Traits<W>;
  const typename T::Elem* p = row + j * kChunk;
  if (kVecW && count == kChunk) {
    T::load_vec(p, raw);
    return;
  }
#pragma unroll
  for (int i = 0; i < T::kWords; ++i) raw[i] = 0;
#pragma unroll
  for (int t = 0; t < kChunk; ++t) {
    if (t < count) T::put(raw, t, p[t]);
  }
}

// The number of elements of chunk j: 8, the short tail, or 0 past the end.
__device__ __forceinline__ int chunk_count(std::int64_t j, std::int64_t full, int tail) {
  return j < full ? kChunk : (j == full ? tail : 0);
}

// One lane's group: chunks g + 32u + lane, u < U, of the warp's kColsPerWarp weight rows.
template <WeightType W, int U, bool kVecW>
__device__ __forceinline__ void load_group(std::uint32_t (&raw)[U][kColsPerWarp][Traits<W>::kWords],
                                           const typename Traits<W>::Elem* const (&rows)[kColsPerWarp],
                                           std::int64_t g, std::int64_t full, int tail, int lane) {
  const bool whole = g + kLanes * U <= full;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const std::int64_t j = g + u * kLanes + lane;
    const int count = whole ? kChunk : chunk_count(j, full, tail);
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) load_chunk<W, kVecW>(rows[c], j, count, raw[u][c]);
  }
}

// acc[r][c] += x[r, chunk] . w[c, chunk] over the chunk's first `count` elements, in element
// order, one fmaf each. xs_chunk points at lo + 4 * (chunk index within the slab) of row 0.
template <WeightType W, int R, int KS>
__device__ __forceinline__ void fma_chunk(float (&acc)[R][kColsPerWarp],
                                          const std::uint32_t (&raw)[kColsPerWarp][Traits<W>::kWords],
                                          const float* xs_chunk, int count) {
  using L = XLayout<KS>;
  float wf[kColsPerWarp][kChunk];
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) {
#pragma unroll
    for (int t = 0; t < kChunk; ++t) wf[c][t] = Traits<W>::get(raw[c], t);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float4 lo = *reinterpret_cast<const float4*>(xs_chunk + r * L::kRowStride);
    const float4 hi = *reinterpret_cast<const float4*>(xs_chunk + r * L::kRowStride + L::kHiOffset);
    const float xv[kChunk] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
#pragma unroll
      for (int t = 0; t < kChunk; ++t) {
        if (t < count) acc[r][c] = __fmaf_rn(xv[t], wf[c][t], acc[r][c]);
      }
    }
  }
}

// acc += the lane's chunks of group g (g + 32u + lane, u < U, in increasing u), each over its
// count of elements. xs_group points at lo + 4 * (g + lane - first chunk of the slab) of row 0.
template <WeightType W, int R, int KS, int U>
__device__ __forceinline__ void fma_group(float (&acc)[R][kColsPerWarp],
                                          const std::uint32_t (&raw)[U][kColsPerWarp][Traits<W>::kWords],
                                          const float* xs_group, std::int64_t g, std::int64_t full, int tail,
                                          int lane) {
  if (g + kLanes * U <= full) {  // every chunk of the group is whole (all groups but a slab's last)
#pragma unroll
    for (int u = 0; u < U; ++u) fma_chunk<W, R, KS>(acc, raw[u], xs_group + u * kLanes * 4, kChunk);
  } else {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int count = chunk_count(g + u * kLanes + lane, full, tail);
      if (count > 0) fma_chunk<W, R, KS>(acc, raw[u], xs_group + u * kLanes * 4, count);
    }
  }
}

// Grid: x = row tiles of R rows (fastest, so the tiles of one weight slice run together),
// y = column blocks of kColsPerBlock (offset by col_block0). Block: kThreads.
// Two blocks per SM (<= 128 registers a thread): 16 warps, each with 4-8 KiB of weights in flight.
// F32 weights with 8 rows need more registers (8 x 4 accumulators next to 2 x 32 raw words) and
// get one block per SM rather than spills; F32 weights are not what decode streams.
template <WeightType W, int R>
constexpr int kMinBlocksPerSm = (W == WeightType::kF32 && R >= 8) ? 1 : 2;

template <WeightType W, int R, bool kVecW>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<W, R>) linear_invariant_kernel(const InvariantArgs a) {
  using T = Traits<W>;
  using Elem = typename T::Elem;
  constexpr int KS = kXSlabFloats / R;  // k elements per staged slab
  using L = XLayout<KS>;
  constexpr int U = kGroupChunks<W, R>;
  constexpr int kGroup = kLanes * U;  // chunks per warp per group
  static_assert(U >= 1 && (KS / kChunk) % kGroup == 0, "a group must not straddle two slabs");
  static_assert(R * L::kRowStride * sizeof(float) <= 48 * 1024, "static shared memory limit");
  __shared__ __align__(16) float xs[R * L::kRowStride];

  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int warp = static_cast<int>(threadIdx.x) / kLanes;
  std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * R, row_end = a.m;
  const void* w = a.w;
  if (a.tiles != nullptr) {
    // The whole block reads the same tile, so an unused tile's block leaves before any barrier.
    const GroupTile tile = a.tiles[blockIdx.x];
    if (tile.expert < 0) return;
    row0 = tile.begin;
    row_end = tile.end;
    w = a.expert_w[tile.expert];
  }
  const std::int64_t col0 = ((a.col_block0 + blockIdx.y) * kWarps + warp) * kColsPerWarp;
  // Columns past n (the last block's) read row n - 1 and store nothing: every warp runs the whole
  // loop, so every thread reaches every barrier.
  const Elem* rows[kColsPerWarp];
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) {
    const std::int64_t col = col0 + c < a.n ? col0 + c : a.n - 1;
    rows[c] = static_cast<const Elem*>(w) + col * a.ldw;
  }
  const std::int64_t full = a.k / kChunk;  // chunks with all 8 elements
  const int tail = static_cast<int>(a.k % kChunk);

  float acc[R][kColsPerWarp];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) acc[r][c] = 0.0f;
  }

  std::uint32_t ra[U][kColsPerWarp][T::kWords], rb[U][kColsPerWarp][T::kWords];
  for (std::int64_t s0 = 0; s0 < a.k; s0 += KS) {
    const int len = static_cast<int>(a.k - s0 < KS ? a.k - s0 : KS);
    const std::int64_t c_begin = s0 / kChunk;  // s0 is a multiple of KS, hence of 8
    const std::int64_t c_end = c_begin + (len + kChunk - 1) / kChunk;
    // The slab's first weight loads go out before the barrier and the x staging, so they overlap.
    load_group<W, U, kVecW>(ra, rows, c_begin, full, tail, lane);
    if (s0 > 0) __syncthreads();  // every warp is done with the previous slab's x
    stage_x<R, KS>(xs, a, row0, row_end, s0, len);
    __syncthreads();
    const float* xs_lane = xs + lane * 4;  // chunk g + 32u + lane of the slab is at xs_lane + 4 (g - c_begin + 32u)
    // Groups alternate between ra and rb; a group's loads are issued before the previous group's
    // FMAs. Groups never straddle a slab (static_assert above).
    for (std::int64_t g = c_begin;; g += 2 * kGroup) {
      const bool has_b = g + kGroup < c_end;
      if (has_b) load_group<W, U, kVecW>(rb, rows, g + kGroup, full, tail, lane);
      fma_group<W, R, KS, U>(acc, ra, xs_lane + (g - c_begin) * 4, g, full, tail, lane);
      if (!has_b) break;
      const bool has_a = g + 2 * kGroup < c_end;
      if (has_a) load_group<W, U, kVecW>(ra, rows, g + 2 * kGroup, full, tail, lane);
      fma_group<W, R, KS, U>(acc, rb, xs_lane + (g + kGroup - c_begin) * 4, g + kGroup, full, tail, lane);
      if (!has_a) break;
    }
  }

  // The fixed butterfly: all 32 lanes take part and end with the same sum.
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      float v = acc[r][c];
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset /= 2) {
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
      }
      acc[r][c] = v;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      const std::int64_t row = row0 + r, col = col0 + c;
      if (lane == (r * kColsPerWarp + c) % kLanes && row < row_end && col < a.n) {
        a.y[row * a.ldy + col] = a.bias != nullptr ? __fadd_rn(acc[r][c], a.bias[col]) : acc[r][c];
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Launches the kernel over `row_tiles` x the column blocks of a.n (split at kMaxGridY).
template <WeightType W, int R>
cudaError_t launch_grid(InvariantArgs a, std::int64_t row_tiles, bool vec_w, cudaStream_t stream) {
  const std::int64_t col_blocks = (a.n + kColsPerBlock - 1) / kColsPerBlock;
  if (row_tiles > INT_MAX) return cudaErrorInvalidValue;
  for (std::int64_t cb = 0; cb < col_blocks; cb += kMaxGridY) {
    a.col_block0 = cb;
    const dim3 grid(static_cast<unsigned>(row_tiles),
                    static_cast<unsigned>(col_blocks - cb < kMaxGridY ? col_blocks - cb : kMaxGridY));
    if (vec_w) {
      linear_invariant_kernel<W, R, true><<<grid, kThreads, 0, stream>>>(a);
    } else {
      linear_invariant_kernel<W, R, false><<<grid, kThreads, 0, stream>>>(a);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <WeightType W, int R>
cudaError_t launch(const LinearArgs& args, cudaStream_t stream) {
  InvariantArgs a{};
  a.x = args.x;
  a.ldx = args.ldx;
  a.w = args.w;
  a.ldw = args.ldw;
  a.bias = args.bias;
  a.y = args.y;
  a.ldy = args.ldy;
  a.m = args.m;
  a.n = args.n;
  a.k = args.k;
  a.x_vec = aligned16(args.x) && args.ldx % 4 == 0;
  const auto elem = static_cast<std::int64_t>(sizeof(typename Traits<W>::Elem));
  // Chunk j starts 8j * elem bytes into its row: a multiple of 16 once the row start is.
  const bool vec_w = aligned16(args.w) && (args.ldw * elem) % 16 == 0;
  return launch_grid<W, R>(a, (args.m + R - 1) / R, vec_w, stream);
}

template <WeightType W, int R>
cudaError_t launch_grouped(const GroupedLinearArgs& args, cudaStream_t stream) {
  InvariantArgs a{};
  a.x = args.x;
  a.ldx = args.ldx;
  a.ldw = args.ldw;
  a.y = args.y;
  a.ldy = args.ldy;
  a.m = 0;  // unused: each tile bounds its own rows
  a.n = args.n;
  a.k = args.k;
  a.x_vec = aligned16(args.x) && args.ldx % 4 == 0;
  a.tiles = args.tiles;
  a.expert_w = args.weights;
  return launch_grid<W, R>(a, args.max_tiles, args.weights_vec, stream);
}

// Rows per tile by m: every m <= 8 is one tile (the weights are read once); larger m is tiled by 8.
// R changes only how many accumulators a warp keeps, not any element's reduction order.
template <WeightType W>
cudaError_t launch_by_rows(const LinearArgs& args, cudaStream_t stream) {
  if (args.m == 1) return launch<W, 1>(args, stream);
  if (args.m == 2) return launch<W, 2>(args, stream);
  if (args.m <= 4) return launch<W, 4>(args, stream);
  return launch<W, 8>(args, stream);
}

template <WeightType W>
cudaError_t grouped_by_rows(const GroupedLinearArgs& args, cudaStream_t stream) {
  switch (args.rows_per_tile) {
    case 1: return launch_grouped<W, 1>(args, stream);
    case 2: return launch_grouped<W, 2>(args, stream);
    case 4: return launch_grouped<W, 4>(args, stream);
    case 8: return launch_grouped<W, 8>(args, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t linear_grouped(const GroupedLinearArgs& args, cudaStream_t stream) {
  if (args.max_tiles <= 0 || args.n <= 0) return cudaSuccess;
  if (args.k <= 0 || args.tiles == nullptr || args.weights == nullptr) return cudaErrorInvalidValue;
  switch (args.w_type) {
    case WeightType::kF32: return grouped_by_rows<WeightType::kF32>(args, stream);
    case WeightType::kBF16: return grouped_by_rows<WeightType::kBF16>(args, stream);
    case WeightType::kF16: return grouped_by_rows<WeightType::kF16>(args, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t linear_invariant(const LinearArgs& args, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return cudaSuccess;
  switch (args.w_type) {
    case WeightType::kF32: return launch_by_rows<WeightType::kF32>(args, stream);
    case WeightType::kBF16: return launch_by_rows<WeightType::kBF16>(args, stream);
    case WeightType::kF16: return launch_by_rows<WeightType::kF16>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace baton::cuda
