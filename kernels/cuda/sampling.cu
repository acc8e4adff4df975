#include "kernels/cuda/sampling.cuh"

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/philox.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kRadixBuckets = 256;
// Top-p masses are summed as integers, e * 2^45 truncated (e = exp(s - max) <= 1), so that the
// atomic bucket sums are exact and independent of thread order; a vocabulary of up to 2^18
// tokens cannot overflow 64 bits. Masses below 2^-45 of the top token's count as 0.
constexpr double kMassScale = 35184372088832.0;  // 2^45

// An order-preserving map of floats (no NaN) to unsigned keys: a < b iff key(a) < key(b). -0 is
// made +0 first, as the host's float comparisons treat them.
__device__ inline std::uint32_t order_key(float x) {
  const std::uint32_t b = __float_as_uint(x + 0.0f);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

__device__ inline float key_value(std::uint32_t k) {
  return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k);
}

// Block-wide reductions and scans in a fixed order (a shuffle tree per warp, then warp 0 over the
// warps' results), so equal inputs give equal bits on every run. `scratch` holds kWarps values.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = scratch[lane];
    for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// The sum of the values of the threads before this one.
__device__ double block_exclusive_scan(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double inclusive = v;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    double total = scratch[lane];
    for (int offset = 1; offset < 32; offset <<= 1) {
      const double up = __shfl_up_sync(0xffffffffu, total, offset);
      if (lane >= offset) total += up;
    }
    scratch[lane] = total;  // inclusive over warps
  }
  __syncthreads();
  const double before_warp = warp == 0 ? 0.0 : scratch[warp - 1];
  return before_warp + inclusive - v;
}

struct Max {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct Or {
  __device__ int operator()(int a, int b) const { return a | b; }
};
struct MaxI {
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return b > a ? b : a; }
};

// The largest key whose count of keys >= it, among entries with keep(i), reaches `rank` (1-based):
// the rank-th largest key. Four passes of 8 bits.
template <class KeyOf>
__device__ std::uint32_t radix_select_count(std::int64_t n, KeyOf key_of, std::uint32_t rank,
                                            unsigned int* hist) {
  std::uint32_t prefix = 0, mask = 0;
  __shared__ std::uint32_t chosen, remaining;
  if (threadIdx.x == 0) remaining = rank;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kRadixBuckets; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
      std::uint32_t k;
      if (key_of(i, &k) && (k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint32_t d = 0;
      for (int b = kRadixBuckets - 1; b >= 0; --b) {
        if (remaining <= hist[b]) {
          d = static_cast<std::uint32_t>(b);
          break;
        }
        remaining -= hist[b];
      }
      chosen = d;
    }
    __syncthreads();
    prefix |= chosen << shift;
    mask |= 0xffu << shift;
  }
  return prefix;
}

// For top-p: the key v where the mass of entries in key order (descending) first reaches
// `target`, with `above` = the mass of keys > v. Masses are exact integers (kMassScale).
template <class MassOf>
__device__ std::uint32_t radix_select_mass(std::int64_t n, MassOf mass_of, unsigned long long target,
                                           unsigned long long* hist, unsigned long long* above_out) {
  std::uint32_t prefix = 0, mask = 0;
  __shared__ std::uint32_t chosen;
  __shared__ unsigned long long above;
  if (threadIdx.x == 0) above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kRadixBuckets; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
      std::uint32_t k;
      unsigned long long m;
      if (mass_of(i, &k, &m) && (k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 0xffu], m);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = -1, last_nonempty = 0;
      for (int b = kRadixBuckets - 1; b >= 0; --b) {
        if (hist[b] == 0) continue;
        last_nonempty = b;
        if (above + hist[b] >= target) {
          d = b;
          break;
        }
        above += hist[b];
      }
      if (d < 0) {  // cannot happen while target <= the total; keep every candidate then
        d = last_nonempty;
        above -= hist[d];
      }
      chosen = static_cast<std::uint32_t>(d);
    }
    __syncthreads();
    prefix |= chosen << shift;
    mask |= 0xffu << shift;
  }
  *above_out = above;
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(RowsArg logits, const SampleRowArgs* __restrict__ args, std::int32_t* out,
                                   std::int32_t has_nan, std::int32_t no_finite) {
  const std::int64_t r = blockIdx.x;
  const SampleRowArgs a = args[r];
  if (a.temperature < 0.0f) return;
  const float* row = row_ptr<const float>(logits, r);
  const std::int64_t n = logits.cols;
  const bool greedy = a.temperature <= 1e-5f;
  const float t = greedy ? 1.0f : a.temperature;

  __shared__ double dscratch[kWarps];
  __shared__ float fscratch[kWarps];
  __shared__ int iscratch[kWarps];
  __shared__ std::int64_t lscratch[kWarps];
  __shared__ unsigned int count_hist[kRadixBuckets];
  __shared__ unsigned long long mass_hist[kRadixBuckets];

  // Scaled logits s = x / T (the host divides the same way), their max, and NaN.
  float m = -INFINITY;
  int nan = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float s = row[i] / t;
    nan |= s != s;
    m = s > m ? s : m;
  }
  nan = block_reduce(nan, Or{}, iscratch);
  m = block_reduce(m, Max{}, fscratch);
  if (nan != 0 || m == -INFINITY) {
    if (threadIdx.x == 0) out[r] = nan != 0 ? has_nan : no_finite;
    return;
  }
  if (!greedy && m == INFINITY) {  // x / T overflowed: no distribution to draw from
    if (threadIdx.x == 0) out[r] = has_nan;
    return;
  }
  if (greedy) {
    // The lowest index holding the max (argmax_rows' rule).
    std::int64_t first = INT64_MIN;  // -(this thread's lowest index holding m), or none
    for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
      if (row[i] == m) {
        first = -i;
        break;
      }
    }
    first = block_reduce(first, MaxI{}, lscratch);  // the max of -i: the lowest i
    if (threadIdx.x == 0) out[r] = static_cast<std::int32_t>(-first);
    return;
  }

  // Top-k: keep s >= the k-th largest s.
  float top_k_min = -INFINITY;
  if (a.top_k > 0 && a.top_k < n) {
    const std::uint32_t key = radix_select_count(
        n,
        [&](std::int64_t i, std::uint32_t* k) {
          *k = order_key(row[i] / t);
          return true;
        },
        static_cast<std::uint32_t>(a.top_k), count_hist);
    top_k_min = key_value(key);
  }
  // e = exp(s - max) on the top-k set, 0 elsewhere (recomputed in each pass: no scratch rows).
  auto e_of = [&](std::int64_t i) -> float {
    const float s = row[i] / t;
    return s >= top_k_min ? expf(s - m) : 0.0f;
  };

  // Top-p: the shortest prefix of (s descending, id ascending) whose mass reaches top_p of the
  // total. The cut is a key v and, among the entries with key v, the ids up to last_tie_id.
  std::uint32_t cut_key = 0;
  std::int64_t last_tie_id = INT64_MAX;
  if (a.top_p < 1.0f) {
    unsigned long long total = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
      total += static_cast<unsigned long long>(static_cast<double>(e_of(i)) * kMassScale);
    }
    // Integer sums: exact in any order, so one shared atomic per thread is deterministic.
    __shared__ unsigned long long total_shared;
    if (threadIdx.x == 0) total_shared = 0;
    __syncthreads();
    atomicAdd(&total_shared, total);
    __syncthreads();
    const auto target = static_cast<unsigned long long>(
        ceil(static_cast<double>(a.top_p) * static_cast<double>(total_shared)));
    unsigned long long above = 0;
    cut_key = radix_select_mass(
        n,
        [&](std::int64_t i, std::uint32_t* k, unsigned long long* mass) {
          const float e = e_of(i);
          *k = order_key(row[i] / t);
          *mass = static_cast<unsigned long long>(static_cast<double>(e) * kMassScale);
          return e > 0.0f;
        },
        target > 0 ? target : 1, mass_hist, &above);
    // Entries with the cut key all have the same e: the first ceil((target - above) / mass) of
    // them in id order are kept. Each thread counts them over a contiguous range of ids.
    const float cut_s = key_value(cut_key);
    const unsigned long long tie_mass =
        static_cast<unsigned long long>(static_cast<double>(expf(cut_s - m)) * kMassScale);
    const unsigned long long need = target > above ? target - above : 1;
    const unsigned long long ties_needed = tie_mass > 0 ? (need + tie_mass - 1) / tie_mass : 1;
    const std::int64_t chunk = (n + kThreads - 1) / kThreads;
    const std::int64_t begin = threadIdx.x * chunk, end = begin + chunk < n ? begin + chunk : n;
    double ties = 0;
    for (std::int64_t i = begin; i < end; ++i) ties += (e_of(i) > 0.0f && order_key(row[i] / t) == cut_key) ? 1.0 : 0.0;
    const double before = block_exclusive_scan(ties, dscratch);
    __shared__ std::int64_t last_shared;
    if (threadIdx.x == 0) last_shared = INT64_MAX;
    __syncthreads();
    if (before < static_cast<double>(ties_needed) && before + ties >= static_cast<double>(ties_needed)) {
      double seen = before;
      for (std::int64_t i = begin; i < end; ++i) {
        if (e_of(i) > 0.0f && order_key(row[i] / t) == cut_key && ++seen >= static_cast<double>(ties_needed)) {
          last_shared = i;
          break;
        }
      }
    }
    __syncthreads();
    last_tie_id = last_shared;
  }
  const bool cut = a.top_p < 1.0f;
  // The kept e after top-p and min-p (relative to the top token: e < min_p is dropped).
  auto kept_e = [&](std::int64_t i) -> float {
    const float e = e_of(i);
    if (e <= 0.0f) return 0.0f;
    if (cut) {
      const std::uint32_t k = order_key(row[i] / t);
      if (k < cut_key || (k == cut_key && i > last_tie_id)) return 0.0f;
    }
    return e < a.min_p ? 0.0f : e;
  };

  // Normalize (sum in double: per thread over a contiguous range, then the fixed tree) and draw:
  // the first id whose cumulative probability, in id order, reaches u.
  const std::int64_t chunk = (n + kThreads - 1) / kThreads;
  const std::int64_t begin = threadIdx.x * chunk, end = begin + chunk < n ? begin + chunk : n;
  double z_part = 0;
  for (std::int64_t i = begin; i < end; ++i) z_part += kept_e(i);
  const double z = block_reduce(z_part, SumD{}, dscratch);
  double p_part = 0;
  std::int64_t last_positive = -1;
  for (std::int64_t i = begin; i < end; ++i) {
    const float p = static_cast<float>(kept_e(i) / z);
    p_part += p;
    if (p > 0.0f) last_positive = i;
  }
  // Thread j owns the cumulative interval (before[j], before[j + 1]]. The scan's rounding could
  // in principle make two intervals overlap; the lowest claimed id wins, so the result is still
  // fixed by the inputs.
  __shared__ double bounds[kThreads + 1];
  const double before = block_exclusive_scan(p_part, dscratch);
  bounds[threadIdx.x] = before;
  if (threadIdx.x == kThreads - 1) bounds[kThreads] = before + p_part;
  __syncthreads();
  const double u = philox_uniform(a.seed, kPhiloxTokenPurpose, a.position, 0);
  __shared__ long long drawn;
  if (threadIdx.x == 0) drawn = LLONG_MAX;
  __syncthreads();
  if (bounds[threadIdx.x] < u && u <= bounds[threadIdx.x + 1]) {
    // Within the range, the host's rule; if rounding leaves the running sum short of u, the
    // range's last positive entry.
    double cum = before;
    std::int64_t pick = last_positive;
    for (std::int64_t i = begin; i < end; ++i) {
      cum += static_cast<float>(kept_e(i) / z);
      if (u <= cum) {
        pick = i;
        break;
      }
    }
    if (pick >= 0) atomicMin(&drawn, static_cast<long long>(pick));
  }
  // u above the total (rounding): the last entry with a positive probability, as on the host.
  last_positive = block_reduce(last_positive, MaxI{}, lscratch);  // its barriers publish `drawn`
  if (threadIdx.x == 0) out[r] = static_cast<std::int32_t>(drawn != LLONG_MAX ? drawn : last_positive);
}

}  // namespace

cudaError_t sample_rows(RowsArg logits, const SampleRowArgs* rows, std::int32_t* out, std::int32_t has_nan,
                        std::int32_t no_finite, cudaStream_t stream) {
  if (logits.count == 0) return cudaSuccess;
  if (logits.count > 0x7fffffff || logits.cols <= 0 || logits.cols > (1 << 18)) return cudaErrorInvalidValue;
  sample_rows_kernel<<<static_cast<unsigned>(logits.count), kThreads, 0, stream>>>(logits, rows, out, has_nan,
                                                                                    no_finite);
  return cudaGetLastError();
}

}  // namespace baton::cuda
