// Paged attention on CUDA (attention.cuh; write_kv is in kv_write.cu): causal (optionally
// sliding-window) GQA attention of each new token over its sequence's cached keys and values. One
// kernel serves decode, varlen prefill and verification batches. F32 queries, an F32 or BF16 cache
// (BF16 rows widened exactly on load, so they enter the same F32 arithmetic), F32 accumulation, F32
// out. Two modes with the same bits: "whole", where a CTA folds all of its rows' context segments
// itself, and "split" (a small decode batch), where several CTAs share a row's segments, store
// their states in the caller's workspace, and attention_combine_kernel folds them.
//
// Must not: allocate (split mode uses only the workspace it is lent), synchronize with the host,
// use atomics, or let a token's result depend on the other tokens of the call (the
// batch-invariance argument is written above paged_attention_kernel). Every arithmetic step of the
// attention path is an explicitly rounded intrinsic (__fmaf_rn, __fmul_rn, ...) so that nvcc's FMA
// contraction cannot round the same row differently in different unrolled copies of a loop.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/float_vec.cuh"

namespace baton::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- paged attention: work split ------------------------------------------------------------------

constexpr int kWarps = 8;                        // warps per CTA = fixed split of the context
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 32;                       // keys per chunk (one per lane in the softmax)
constexpr int kLanesPerKey = 8;                  // lanes sharing one key's dot products
constexpr int kKeysPerStep = 32 / kLanesPerKey;  // keys scored per warp step
constexpr int kSteps = kChunk / kKeysPerStep;    // steps per chunk
constexpr int kMaxHeadDim = 256;
constexpr int kSegment = kWarps * kChunk;        // positions per segment (one chunk per warp)

// Compile-time shape of one kernel instance. KW: float width of the score phase's key loads; VW x
// NV: floats per lane of a head_dim row in the value phase (kMaxDim = 32 * VW * NV >= head_dim).
template <int KW_, int VW_, int NV_>
struct Config {
  static constexpr int KW = KW_, VW = VW_, NV = NV_;
  static constexpr int kMaxDim = 32 * VW * NV;
  static constexpr int kMaxRows = kMaxDim <= 128 ? 8 : 4;  // query rows (token x head) per CTA
  static constexpr int kKeyVecs = kMaxDim / KW / kLanesPerKey;  // key vectors per lane per key
  // Loads in flight per lane, about 64 floats: score steps, and value rows.
  static constexpr int kStepsInFlight = 512 / kMaxDim;
  static constexpr int kValuesInFlight = 64 / (VW * NV);
  // Shared memory (floats, struct Shared): queries [kMaxRows, kMaxDim], each warp's
  // scores/probabilities [kWarps, kMaxRows, kChunk] and the warps' partial outputs
  // [kWarps, kMaxRows, kMaxDim].
  static constexpr int kQueryFloats = kMaxRows * kMaxDim;
  static constexpr int kScoreFloats = kWarps * kMaxRows * kChunk;
  static constexpr int kPartialFloats = kWarps * kMaxRows * kMaxDim;
  static_assert(kSteps % kStepsInFlight == 0 && kKeyVecs >= 1 && kValuesInFlight >= 1, "config");
  static_assert((kQueryFloats + kScoreFloats + kPartialFloats + 2 * kWarps * kMaxRows + 2 * kMaxRows) * 4 <= 48 * 1024,
                "static shared memory");
};

// How the call's query rows are dealt to CTAs. Chosen per call from the batch shape; it changes
// which rows share a CTA, never the arithmetic of a row (see paged_attention_kernel).
struct Plan {
  int group = 1;        // query heads per kv head
  int head_splits = 1;  // CTAs sharing one kv head's query heads (when the group exceeds max_rows)
  int cta_heads = 1;    // query heads per CTA (the last split may have fewer)
  int tile_tokens = 1;  // consecutive tokens per CTA (a CTA walks them as runs of one sequence each)
};

// CTAs a plan launches per split (grid x * grid y).
std::int64_t plan_ctas(const AttentionArgs& a, const Plan& p) {
  return (a.q.tokens + p.tile_tokens - 1) / p.tile_tokens * a.cache.kv_heads * p.head_splits;
}

Plan make_plan(const AttentionArgs& a, int max_rows, int sm_count) {
  Plan p;
  p.group = a.q.heads / a.cache.kv_heads;
  // Neighbouring tokens of one sequence (prefill, verification) share a CTA and its K/V reads; a
  // CTA walks the sequences of its tile one after another, so tiles grow with the average number
  // of queries per sequence: a decode batch keeps one token per CTA and its sequences in parallel.
  const std::int64_t per_seq = a.num_seqs > 0 ? a.q.tokens / a.num_seqs : a.q.tokens;
  const auto use = [&](int cta_heads) {
    p.head_splits = (p.group + cta_heads - 1) / cta_heads;
    p.cta_heads = (p.group + p.head_splits - 1) / p.head_splits;
    const int most = max_rows / p.cta_heads;
    p.tile_tokens = per_seq < 1 ? 1 : (per_seq < most ? static_cast<int>(per_seq) : most);
  };
  // As many of a kv head's query heads per CTA as fit (they share its K/V reads)... unless the grid
  // leaves SMs idle (a small decode batch): then fewer heads per CTA, down to one, while the grid
  // stays within one wave (each CTA reads the kv head's K/V; the repeats come from L2).
  int cta_heads = p.group < max_rows ? p.group : max_rows;
  use(cta_heads);
  while (cta_heads > 1) {
    const Plan wider = p;
    use((cta_heads + 1) / 2);
    if (plan_ctas(a, p) > sm_count) {
      p = wider;
      break;
    }
    cta_heads = (cta_heads + 1) / 2;
  }
  return p;
}

// The SMs of the calling thread's current device (cached per device; 132 on an H100/H200).
int sm_count() {
  static std::atomic<int> cached[16];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 16) return 1;
  int n = cached[device].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n < 1) n = 1;
    cached[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Split mode's per-(row, segment) states, row = token * heads + head: ml [rows, segments, 2]
// (m, l), acc [rows, segments, head_dim]; carved from AttentionArgs::workspace.
struct SplitWorkspace {
  float* ml = nullptr;
  float* acc = nullptr;
  std::int64_t segments = 0;
};

// One pass of a CTA: `rows` query rows of one sequence and kv head, row r being
// (token0 + r / heads, head0 + r % heads). All threads of the CTA hold the same Run.
struct Run {
  std::int64_t token0 = 0;
  int heads = 0;
  int head0 = 0;
  int rows = 0;                          // <= kMaxRows
  int kv_head = 0;
  const std::int32_t* blocks = nullptr;  // the sequence's block table row
  int lo = 0, hi = 0;                    // key positions some row attends to: [lo, hi)
};

// Per-row online-softmax state of one warp's share of the context. Warp-uniform values.
template <int kMaxRows>
struct RowState {
  float m[kMaxRows];     // running max of the scaled scores (-inf before the first key)
  float l[kMaxRows];     // running sum of exp(score - m)
  float corr[kMaxRows];  // this chunk's rescale of the row's sums
  int lo[kMaxRows];      // this chunk's keys the row sees: [lo, hi), chunk-relative; empty when lo >= hi
  int hi[kMaxRows];
};

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}

// A fixed butterfly; every lane ends with the same bits (each step adds the same two values).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}

// Sum over the kLanesPerKey lanes of a key group (lanes differing in their low 3 bits).
__device__ __forceinline__ float key_group_sum(float x) {
#pragma unroll
  for (int o = kLanesPerKey / 2; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}

// Row r's [head_dim] vector in q or out.
__device__ __forceinline__ float* head_row(const HeadsArg& x, const Run& run, int r) {
  return x.data + (run.token0 + r / run.heads) * x.stride0 + static_cast<std::int64_t>(run.head0 + r % run.heads) * x.stride1;
}

// Offset (elements) of the key row of position `pos` for the run's kv head; its value row is
// block_size * kv_heads * head_dim further.
__device__ __forceinline__ std::int64_t key_row_offset(const KvCacheArg& c, const Run& run, int pos) {
  const std::int64_t block = run.blocks[pos / c.block_size];
  const std::int64_t row = static_cast<std::int64_t>(c.kv_heads) * c.head_dim;
  return (block * 2 * c.block_size + pos % c.block_size) * row + static_cast<std::int64_t>(run.kv_head) * c.head_dim;
}

// ---- paged attention: one chunk of 32 keys, one warp ----------------------------------------------

// Raw dot products q_r . k for the chunk's keys into p_s[r][k]. Groups of kLanesPerKey lanes take
// one key each (kKeysPerStep keys per step); lane li of a group reads the key's KW-element vectors
// li, li + 8, ... (coalesced 128-bit reads when KW = 4 on an F32 cache, 64-bit on BF16), so every
// K byte is read once for all rows.
// kStepsInFlight steps' loads are issued before their arithmetic. A dot is a fixed FMA chain per
// lane, then a fixed 3-level butterfly: its bits depend only on q_r, the key and head_dim.
template <class C, class T>
__device__ __forceinline__ void chunk_scores(const T* __restrict__ keys, std::int64_t key_row, int base,
                                             const Run& run, int head_dim, const float* q_s, float* p_s, int lane) {
  constexpr int KW = C::KW, kVecs = C::kKeyVecs, kInFlight = C::kStepsInFlight;
  const int nvec = head_dim / KW;
  const int group = lane / kLanesPerKey, li = lane % kLanesPerKey;
#pragma unroll 1
  for (int step0 = 0; step0 < kSteps; step0 += kInFlight) {
    Vec<KW> key[kInFlight][kVecs];
#pragma unroll
    for (int s = 0; s < kInFlight; ++s) {
      const int k = (step0 + s) * kKeysPerStep + group;
      const std::int64_t row = __shfl_sync(kFullMask, key_row, k);
      const bool in_run = base + k >= run.lo && base + k < run.hi;
#pragma unroll
      for (int m = 0; m < kVecs; ++m) {
        const int v = li + kLanesPerKey * m;
        key[s][m] = in_run && v < nvec ? load_cached<KW>(keys + row + v * KW) : zero_vec<KW>();
      }
    }
#pragma unroll
    for (int s = 0; s < kInFlight; ++s) {
      const int k = (step0 + s) * kKeysPerStep + group;
#pragma unroll
      for (int r = 0; r < C::kMaxRows; ++r) {
        if (r < run.rows) {  // warp-uniform
          float dot = 0.0f;
#pragma unroll
          for (int m = 0; m < kVecs; ++m) {
            const int v = li + kLanesPerKey * m;
            if (v < nvec) {
              const Vec<KW> q = load_vec<KW>(q_s + r * C::kMaxDim + v * KW);
#pragma unroll
              for (int e = 0; e < KW; ++e) dot = __fmaf_rn(q.v[e], key[s][m].v[e], dot);
            }
          }
          dot = key_group_sum(dot);
          if (li == 0) p_s[r * kChunk + k] = dot;
        }
      }
    }
  }
}

// Online softmax over the chunk, lane = key: for each row that sees some of the chunk's keys,
// scale its scores, update its running max and sum, leave exp(score - max) in p_s[r][key] (0 for
// keys it does not see) and the rescale of its earlier sums in st.corr. Rows that see none of the
// chunk are left untouched.
template <int kMaxRows>
__device__ __forceinline__ void chunk_softmax(int base, const Run& run, float scale, const int* row_lo,
                                              const int* row_hi, float* p_s, RowState<kMaxRows>& st, int lane) {
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    st.lo[r] = 0;
    st.hi[r] = 0;
    if (r < run.rows) {
      const int lo = max(row_lo[r] - base, 0), hi = min(row_hi[r] - base, kChunk);
      if (lo < hi) {  // warp-uniform
        st.lo[r] = lo;
        st.hi[r] = hi;
        const bool sees = lane >= lo && lane < hi;
        const float s = sees ? __fmul_rn(p_s[r * kChunk + lane], scale) : -INFINITY;
        const float m = fmaxf(st.m[r], warp_max(s));
        const float p = sees ? expf(__fsub_rn(s, m)) : 0.0f;
        p_s[r * kChunk + lane] = p;
        st.corr[r] = expf(__fsub_rn(st.m[r], m));  // 0 for the row's first chunk (m was -inf)
        st.l[r] = __fmaf_rn(st.l[r], st.corr[r], warp_sum(p));
        st.m[r] = m;
      }
    }
  }
}

// acc_r = acc_r * corr_r + sum over the chunk's keys k the row sees, in increasing k, of
// p_r[k] * v_k. Lane owns the VW-float vectors lane, lane + 32, ... of a head_dim row, so each
// value row is one coalesced warp read shared by all rows; kValuesInFlight rows are loaded before
// their arithmetic. Keys a row does not see are skipped (not multiplied by 0), so a row's
// operations are the same whatever other rows share the CTA.
template <class C, class T>
__device__ __forceinline__ void chunk_values(const T* __restrict__ values, std::int64_t key_row, int base,
                                             const Run& run, int head_dim, const float* p_s,
                                             const RowState<C::kMaxRows>& st,
                                             float (&acc)[C::kMaxRows][C::NV][C::VW], int lane) {
  constexpr int VW = C::VW, NV = C::NV, kInFlight = C::kValuesInFlight;
  const int nvec = head_dim / VW;
#pragma unroll
  for (int r = 0; r < C::kMaxRows; ++r) {
    if (r < run.rows && st.lo[r] < st.hi[r]) {
#pragma unroll
      for (int n = 0; n < NV; ++n) {
#pragma unroll
        for (int e = 0; e < VW; ++e) acc[r][n][e] = __fmul_rn(acc[r][n][e], st.corr[r]);
      }
    }
  }
  const int k_lo = max(run.lo - base, 0), k_hi = min(run.hi - base, kChunk);
#pragma unroll 1
  for (int k0 = k_lo; k0 < k_hi; k0 += kInFlight) {
    Vec<VW> value[kInFlight][NV];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int k = k0 + u;
      const std::int64_t row = __shfl_sync(kFullMask, key_row, k % kChunk);
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        const int v = lane + 32 * n;
        value[u][n] = k < k_hi && v < nvec ? load_cached<VW>(values + row + v * VW) : zero_vec<VW>();
      }
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int k = k0 + u;
#pragma unroll
      for (int r = 0; r < C::kMaxRows; ++r) {
        if (r < run.rows && k >= st.lo[r] && k < st.hi[r]) {  // warp-uniform; implies k < k_hi
          const float p = p_s[r * kChunk + k];
#pragma unroll
          for (int n = 0; n < NV; ++n) {
#pragma unroll
            for (int e = 0; e < VW; ++e) acc[r][n][e] = __fmaf_rn(p, value[u][n].v[e], acc[r][n][e]);
          }
        }
      }
    }
  }
}

// ---- paged attention: one run (rows of one sequence), whole CTA ----------------------------------

// Shared memory of a CTA. Queries, scores and the warps' partial states live side by side: the
// queries serve every segment of the run.
template <class C>
struct Shared {
  float q[C::kQueryFloats];                         // [kMaxRows, kMaxDim]
  float p[C::kScoreFloats];                         // [kWarps, kMaxRows, kChunk]
  float partials[C::kPartialFloats];                // [kWarps, kMaxRows, kMaxDim]
  float part_m[kWarps * C::kMaxRows], part_l[kWarps * C::kMaxRows];
  int row_lo[C::kMaxRows], row_hi[C::kMaxRows];
};

// q[r][d] = q row r (scalar reads: q rows may have any stride). Row r's key range into
// row_lo/row_hi: [max(0, pos + 1 - window), pos + 1), or [0, pos + 1) without a window. Then the
// run's range, the union of its rows' ranges.
template <class C>
__device__ void stage_run(const AttentionArgs& a, Run& run, Shared<C>& sh) {
  const int head_dim = a.q.head_dim;
  for (int i = threadIdx.x; i < run.rows * head_dim; i += kThreads) {
    const int r = i / head_dim, d = i % head_dim;
    sh.q[r * C::kMaxDim + d] = head_row(a.q, run, r)[d];
  }
  if (static_cast<int>(threadIdx.x) < run.rows) {
    const int r = static_cast<int>(threadIdx.x);
    const int pos = a.positions[run.token0 + r / run.heads];
    sh.row_lo[r] = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
    sh.row_hi[r] = pos + 1;
  }
  __syncthreads();
  run.lo = INT_MAX;
  run.hi = 0;
  for (int r = 0; r < run.rows; ++r) {
    run.lo = min(run.lo, sh.row_lo[r]);
    run.hi = max(run.hi, sh.row_hi[r]);
  }
}

// This warp's state into the partials (m = -inf for a row its chunk did not reach).
template <class C>
__device__ __forceinline__ void store_partials(const Run& run, int head_dim, const RowState<C::kMaxRows>& st,
                                               const float (&acc)[C::kMaxRows][C::NV][C::VW], float* partials,
                                               float* part_m, float* part_l, int warp, int lane) {
  const int nvec = head_dim / C::VW;
#pragma unroll
  for (int r = 0; r < C::kMaxRows; ++r) {
    if (r < run.rows) {
      if (lane == 0) {
        part_m[warp * C::kMaxRows + r] = st.m[r];
        part_l[warp * C::kMaxRows + r] = st.l[r];
      }
#pragma unroll
      for (int n = 0; n < C::NV; ++n) {
        const int v = lane + 32 * n;
        if (v < nvec) {
          Vec<C::VW> x;
#pragma unroll
          for (int e = 0; e < C::VW; ++e) x.v[e] = acc[r][n][e];
          store_vec<C::VW>(partials + (warp * C::kMaxRows + r) * C::kMaxDim + v * C::VW, x);
        }
      }
    }
  }
}

// Segment s (positions [s * kSegment, (s + 1) * kSegment)): warp w takes its chunk w, from a fresh
// online-softmax state, and leaves (m, l, acc) per row in the partials (m = -inf, l = 0, acc = 0 for
// a row that sees none of the chunk's keys).
template <class C, class T>
__device__ void attend_segment(const AttentionArgs& a, const Run& run, Shared<C>& sh, int s) {
  const int head_dim = a.q.head_dim;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float* p_s = sh.p + warp * C::kMaxRows * kChunk;
  RowState<C::kMaxRows> st;
  float acc[C::kMaxRows][C::NV][C::VW];
#pragma unroll
  for (int r = 0; r < C::kMaxRows; ++r) {
    st.m[r] = -INFINITY;
    st.l[r] = 0.0f;
#pragma unroll
    for (int n = 0; n < C::NV; ++n) {
#pragma unroll
      for (int e = 0; e < C::VW; ++e) acc[r][n][e] = 0.0f;
    }
  }
  const int base = (s * kWarps + warp) * kChunk;
  if (base < run.hi && base + kChunk > run.lo) {  // warp-uniform
    const T* keys = static_cast<const T*>(a.cache.data);
    const T* values = keys + static_cast<std::int64_t>(a.cache.block_size) * a.cache.kv_heads * a.cache.head_dim;
    const int pos = base + lane;
    const std::int64_t key_row = pos >= run.lo && pos < run.hi ? key_row_offset(a.cache, run, pos) : 0;
    chunk_scores<C, T>(keys, key_row, base, run, head_dim, sh.q, p_s, lane);
    __syncwarp();
    chunk_softmax<C::kMaxRows>(base, run, a.scale, sh.row_lo, sh.row_hi, p_s, st, lane);
    __syncwarp();
    chunk_values<C, T>(values, key_row, base, run, head_dim, p_s, st, acc, lane);
  }
  store_partials<C>(run, head_dim, st, acc, sh.partials, sh.part_m, sh.part_l, warp, lane);
}

// The segment's state for row r, element d: the warps' partials combined in warp order 0..kWarps-1
// (warps without keys for the row skipped), relative to the segment's max m, not yet divided by l.
template <class C>
__device__ __forceinline__ void segment_state(const Shared<C>& sh, int r, int d, float& m, float& l, float& acc) {
  m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sh.part_m[w * C::kMaxRows + r]);
  l = 0.0f;
  acc = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const float mw = sh.part_m[w * C::kMaxRows + r];
    if (mw != -INFINITY) {
      const float f = expf(__fsub_rn(mw, m));
      l = __fmaf_rn(sh.part_l[w * C::kMaxRows + r], f, l);
      acc = __fmaf_rn(sh.partials[(w * C::kMaxRows + r) * C::kMaxDim + d], f, acc);
    }
  }
}

// Folds a segment's (m, l, acc) into a row element's running (M, L, ACC). Segments are folded in
// increasing order; one the row does not reach (m = -inf) is skipped. Both modes of the kernel and
// the split combine call exactly this, so the bits do not depend on the mode.
__device__ __forceinline__ void fold_segment(float& M, float& L, float& ACC, float m, float l, float acc) {
  if (m == -INFINITY) return;
  if (M == -INFINITY) {
    M = m;
    L = l;
    ACC = acc;
    return;
  }
  const float nm = fmaxf(M, m);
  const float fa = expf(__fsub_rn(M, nm)), fb = expf(__fsub_rn(m, nm));
  L = __fmaf_rn(l, fb, __fmul_rn(L, fa));
  ACC = __fmaf_rn(acc, fb, __fmul_rn(ACC, fa));
  M = nm;
}

__device__ __forceinline__ float finish(float L, float ACC) { return L > 0.0f ? __fdiv_rn(ACC, L) : 0.0f; }

// The segments a key range [lo, hi) touches: [lo / kSegment, (hi - 1) / kSegment].
__device__ __forceinline__ int first_segment(int lo) { return lo / kSegment; }
__device__ __forceinline__ int last_segment(int hi) { return (hi - 1) / kSegment; }

// Whole mode: the CTA walks all of the run's segments and folds them itself.
template <class C, class T>
__device__ void attend_run_whole(const AttentionArgs& a, Run& run, Shared<C>& sh) {
  constexpr int kSlots = (C::kMaxRows * C::kMaxDim + kThreads - 1) / kThreads;  // elements per thread
  const int head_dim = a.q.head_dim;
  stage_run<C>(a, run, sh);
  float M[kSlots], L[kSlots], ACC[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    M[j] = -INFINITY;
    L[j] = 0.0f;
    ACC[j] = 0.0f;
  }
  if (run.lo < run.hi) {
    for (int s = first_segment(run.lo); s <= last_segment(run.hi); ++s) {
      attend_segment<C, T>(a, run, sh, s);
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int i = static_cast<int>(threadIdx.x) + j * kThreads;
        if (i < run.rows * head_dim) {
          float m, l, acc;
          segment_state<C>(sh, i / head_dim, i % head_dim, m, l, acc);
          fold_segment(M[j], L[j], ACC[j], m, l, acc);
        }
      }
      __syncthreads();  // before the next segment's partials
    }
  }
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    if (i < run.rows * head_dim) head_row(a.out, run, i / head_dim)[i % head_dim] = finish(L[j], ACC[j]);
  }
  __syncthreads();  // before the next run stages its queries
}

// Split mode: this CTA takes the run's segments first + z, first + z + Z, ... (Z = gridDim.z) and
// stores each one's state in the workspace, [row, segment]; attention_combine_kernel folds them.
template <class C, class T>
__device__ void attend_run_split(const AttentionArgs& a, Run& run, Shared<C>& sh, const SplitWorkspace& ws) {
  const int head_dim = a.q.head_dim;
  stage_run<C>(a, run, sh);
  for (int s = first_segment(run.lo) + static_cast<int>(blockIdx.z); run.lo < run.hi && s <= last_segment(run.hi);
       s += static_cast<int>(gridDim.z)) {
    attend_segment<C, T>(a, run, sh, s);
    __syncthreads();
    for (int i = threadIdx.x; i < run.rows * head_dim; i += kThreads) {
      const int r = i / head_dim, d = i % head_dim;
      float m, l, acc;
      segment_state<C>(sh, r, d, m, l, acc);
      const std::int64_t row = (run.token0 + r / run.heads) * a.q.heads + run.head0 + r % run.heads;
      const std::int64_t at = row * ws.segments + s;
      if (d == 0) {
        ws.ml[2 * at] = m;
        ws.ml[2 * at + 1] = l;
      }
      ws.acc[at * head_dim + d] = acc;
    }
    __syncthreads();  // before the next segment's partials
  }
  __syncthreads();  // before the next run stages its queries and ranges
}

// Grid: x = tiles of plan.tile_tokens consecutive tokens, y = kv head x head split, z = the split
// CTAs of a run (split mode; 1 otherwise). Block: kThreads.
//
// Batch invariance. A row's (token, head) result is computed by this exact sequence of operations,
// whatever else the CTA or the call holds, and whichever mode runs it:
//  - keys are grouped in segments of kSegment = kWarps x 32 absolute positions, each split into
//    chunks of 32 positions, chunk w of a segment handled by warp w from a fresh softmax state;
//  - a chunk updates a row only if the row sees one of its keys, and then only with those keys (a
//    dot product's order depends on head_dim alone; max, sum and p * v use fixed butterflies and
//    increasing key order; keys the row does not see are skipped, not weighted by 0);
//  - a segment's kWarps partial states are combined in warp order, skipping warps that saw none of
//    its keys (segment_state); the segments are folded in increasing order (fold_segment), by the
//    CTA itself (whole mode) or by attention_combine_kernel from the workspace (split mode), with
//    the same functions, F32 values passing through memory unchanged.
// Tiles, head splits and the mode (plan) only decide which rows share K/V loads and which CTA does
// what. The instance (Config, T) depends on head_dim, the cache's element type and the cache
// pointer's alignment, which are the same for every token of a model.
template <class C, class T, bool kSplit>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(AttentionArgs a, Plan plan, SplitWorkspace ws) {
  __shared__ __align__(16) Shared<C> sh;
  Run run;
  run.kv_head = static_cast<int>(blockIdx.y) / plan.head_splits;
  const int split = static_cast<int>(blockIdx.y) % plan.head_splits;
  run.head0 = run.kv_head * plan.group + split * plan.cta_heads;
  run.heads = min(plan.cta_heads, plan.group - split * plan.cta_heads);
  if (run.heads <= 0) return;  // CTA-uniform
  const std::int64_t t_begin = static_cast<std::int64_t>(blockIdx.x) * plan.tile_tokens;
  const std::int64_t t_end = t_begin + plan.tile_tokens < a.q.tokens ? t_begin + plan.tile_tokens : a.q.tokens;
  for (std::int64_t t0 = t_begin; t0 < t_end;) {
    const std::int32_t seq = a.token_seq[t0];
    std::int64_t t1 = t0 + 1;
    while (t1 < t_end && a.token_seq[t1] == seq) ++t1;
    run.token0 = t0;
    run.rows = static_cast<int>(t1 - t0) * run.heads;
    run.blocks = a.block_tables + seq * a.max_blocks_per_seq;
    if constexpr (kSplit) {
      attend_run_split<C, T>(a, run, sh, ws);
    } else {
      attend_run_whole<C, T>(a, run, sh);
    }
    t0 = t1;
  }
}

// Split mode's second kernel: one thread per output element (token, head, d) folds the row's
// segments from the workspace in increasing order (the row's own range, read from positions).
__global__ void attention_combine_kernel(AttentionArgs a, SplitWorkspace ws) {
  const int head_dim = a.q.head_dim;
  const std::int64_t total = a.q.tokens * a.q.heads * head_dim;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = e / head_dim;
    const int d = static_cast<int>(e % head_dim);
    const std::int64_t token = row / a.q.heads;
    const int head = static_cast<int>(row % a.q.heads);
    const int pos = a.positions[token];
    const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
    float M = -INFINITY, L = 0.0f, ACC = 0.0f;
    for (int s = first_segment(lo); s <= last_segment(pos + 1); ++s) {
      const std::int64_t at = row * ws.segments + s;
      const float m = ws.ml[2 * at];
      if (m != -INFINITY) fold_segment(M, L, ACC, m, ws.ml[2 * at + 1], ws.acc[at * head_dim + d]);
    }
    a.out.data[token * a.out.stride0 + static_cast<std::int64_t>(head) * a.out.stride1 + d] = finish(L, ACC);
  }
}

template <int KW, int VW, int NV, class T>
cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  using C = Config<KW, VW, NV>;
  const int sms = sm_count();
  // Split mode when the whole-run CTAs (heads already spread) leave more than half the SMs idle (a
  // small decode batch) and the workspace holds [rows, segments] states for the call's context
  // bound; then about one wave: `z` CTAs share each run's segments.
  const Plan plan = make_plan(a, C::kMaxRows, sms);
  const std::int64_t whole_ctas = plan_ctas(a, plan);
  const std::int64_t segments = (a.max_context_len + kSegment - 1) / kSegment;
  const std::int64_t ws_floats = a.q.tokens * a.q.heads * segments * (a.q.head_dim + 2);
  const bool split = 2 * whole_ctas <= sms && segments >= 2 && a.workspace != nullptr &&
                     ws_floats <= a.workspace_floats;
  SplitWorkspace ws;
  int z = 1;
  if (split) {
    z = static_cast<int>(std::min<std::int64_t>({segments, sms / whole_ctas, 65535}));
    ws.segments = segments;
    ws.ml = a.workspace;
    ws.acc = a.workspace + 2 * a.q.tokens * a.q.heads * segments;
  }
  const std::int64_t grid_y = static_cast<std::int64_t>(a.cache.kv_heads) * plan.head_splits;
  if (grid_y > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((a.q.tokens + plan.tile_tokens - 1) / plan.tile_tokens),
                  static_cast<unsigned>(grid_y), static_cast<unsigned>(z));
  if (!split) {
    paged_attention_kernel<C, T, false><<<grid, kThreads, 0, stream>>>(a, plan, ws);
    return cudaGetLastError();
  }
  paged_attention_kernel<C, T, true><<<grid, kThreads, 0, stream>>>(a, plan, ws);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  attention_combine_kernel<<<grid_stride_blocks(a.q.tokens * a.q.heads * a.q.head_dim, 256), 256, 0, stream>>>(a, ws);
  return cudaGetLastError();
}

// The instance for the call's head_dim and cache alignment, over cache elements T.
template <class T>
cudaError_t dispatch_head_dim(const AttentionArgs& a, cudaStream_t stream) {
  const int head_dim = a.q.head_dim;
  // Vector K/V reads (4 elements) need head_dim % 4 == 0 and a cache aligned to 4 elements (rows are
  // then aligned too).
  const bool vec4 = head_dim % 4 == 0 && aligned(a.cache.data, 4 * sizeof(T));
  if (vec4 && head_dim <= 64) return launch_attention<4, 2, 1, T>(a, stream);
  if (vec4 && head_dim <= 128) return launch_attention<4, 4, 1, T>(a, stream);
  if (vec4) return launch_attention<4, 4, 2, T>(a, stream);
  return launch_attention<1, 1, 8, T>(a, stream);  // any even head_dim <= 256, scalar reads
}

}  // namespace

cudaError_t paged_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.q.tokens == 0 || a.q.heads == 0) return cudaSuccess;
  const int head_dim = a.q.head_dim;
  if (a.cache.kv_heads <= 0 || a.q.heads % a.cache.kv_heads != 0 || a.cache.block_size <= 0 || head_dim <= 0 ||
      head_dim % 2 != 0 || head_dim > kMaxHeadDim || a.cache.head_dim != head_dim || a.out.head_dim != head_dim ||
      a.out.heads != a.q.heads || a.out.tokens != a.q.tokens || a.q.tokens > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  switch (a.cache.type) {
    case KvType::kF32: return dispatch_head_dim<float>(a, stream);
    case KvType::kBF16: return dispatch_head_dim<__nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace baton::cuda
