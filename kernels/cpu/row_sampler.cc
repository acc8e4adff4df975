#include "kernels/cpu/row_sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>

#include "common/status.h"

namespace baton::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Top-p without a full sort: tokens are bucketed by how far (in nats, after temperature) their
// logit lies below the max. Every token of a nearer bucket outranks every token of a farther one,
// so the kept prefix is whole buckets plus a sorted prefix of one boundary bucket, and only that
// bucket is sorted. The kept set is a full sort's, up to the order of double additions. The last
// bucket takes everything farther than ~32 nats.
constexpr int kTopPBuckets = 1024;
constexpr float kTopPBucketsPerNat = 32.0f;
constexpr float kTopPMaxGap = (kTopPBuckets - 1) / kTopPBucketsPerNat;

// Top-k at or below this uses a one-pass heap; above it, nth_element.
constexpr std::size_t kTopKHeapMax = 1024;

using TopPMass = std::array<double, kTopPBuckets>;

int top_p_bucket(float max_logit, float logit) {
  const float gap = max_logit - logit;  // >= 0
  return gap >= kTopPMaxGap ? kTopPBuckets - 1 : static_cast<int>(gap * kTopPBucketsPerNat);
}

// The bucket where the top-p prefix ends, the mass of the nearer buckets, and top_p * total.
struct TopPCut {
  int bucket = 0;
  double before = 0.0;
  double target = 0.0;
};

TopPCut find_top_p_cut(const TopPMass& mass, double z, float top_p) {
  TopPCut cut;
  cut.target = static_cast<double>(top_p) * z;
  for (int b = 0; b < kTopPBuckets; ++b) {
    cut.bucket = b;
    if (cut.before + mass[static_cast<std::size_t>(b)] >= cut.target) break;
    if (b + 1 < kTopPBuckets) cut.before += mass[static_cast<std::size_t>(b)];
  }
  return cut;
}

}  // namespace

float RowSampler::scale_and_max(std::span<float> work, float temperature) {
  float max_logit = kNegInf;
  bool any_nan = false;
  for (float& x : work) {
    x /= temperature;
    max_logit = x > max_logit ? x : max_logit;
    any_nan |= std::isnan(x);
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : max_logit;
}

// The k-th largest of work (0 < k < vocab), using `scratch` ([vocab]) as workspace.
float RowSampler::kth_largest(std::span<const float> work, std::size_t k, std::span<float> scratch) {
  if (k <= kTopKHeapMax) {
    // A min-heap of the k largest so far: one pass, and few pushes on a shuffled vocabulary.
    const auto heap = scratch.begin();
    std::copy(work.begin(), work.begin() + static_cast<std::ptrdiff_t>(k), heap);
    const auto heap_end = heap + static_cast<std::ptrdiff_t>(k);
    std::make_heap(heap, heap_end, std::greater<float>());
    for (std::size_t i = k; i < work.size(); ++i) {
      if (work[i] > *heap) {
        std::pop_heap(heap, heap_end, std::greater<float>());
        *(heap_end - 1) = work[i];
        std::push_heap(heap, heap_end, std::greater<float>());
      }
    }
    return *heap;
  }
  std::copy(work.begin(), work.end(), scratch.begin());
  const auto kth = scratch.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(scratch.begin(), kth, scratch.end(), std::greater<float>());
  return *kth;
}

void RowSampler::distribution(std::span<const float> work, float max_logit, std::int32_t top_k, float top_p,
                              float min_p, std::span<float> probs) {
  const std::size_t vocab = work.size();
  BATON_CHECK(probs.size() == vocab, "probs has ", probs.size(), " entries for a vocabulary of ", vocab);
  BATON_CHECK(std::isfinite(max_logit), "logits row max is ", max_logit, " (vocab ", vocab, ")");
  if (top_k > 0 && static_cast<std::size_t>(top_k) < vocab) {
    // A short list: probs holds e = exp(logit - max) (fp32) on the top-k set, 0 elsewhere, and
    // index_[0, n) lists the tokens with e > 0.
    const float threshold = kth_largest(work, static_cast<std::size_t>(top_k), probs);
    index_.resize(vocab);
    std::size_t n = 0;
    for (std::size_t i = 0; i < vocab; ++i) {
      const float e = work[i] >= threshold ? std::exp(work[i] - max_logit) : 0.0f;
      probs[i] = e;
      if (e > 0.0f) index_[n++] = static_cast<std::int32_t>(i);
    }
    if (top_p < 1.0f) n = listed_top_p(work, max_logit, top_p, probs, n);
    double z = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      float& e = probs[static_cast<std::size_t>(index_[j])];
      if (e < min_p) e = 0.0f;
      z += e;
    }
    for (std::size_t j = 0; j < n; ++j) {
      float& e = probs[static_cast<std::size_t>(index_[j])];
      e = static_cast<float>(e / z);
    }
    return;
  }

  if (top_p >= 1.0f) {  // only min-p: one pass, then normalization
    double z = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) {
      const float e = std::exp(work[i] - max_logit);
      probs[i] = e * static_cast<float>(e >= min_p);
      z += probs[i];
    }
    for (float& e : probs) e = static_cast<float>(e / z);
    return;
  }
  // Top-p keeps a prefix of the order (logit descending, id ascending): everything up to and
  // including `last_kept`. Then min-p and normalization, branch-free (kept or not is a coin flip
  // per token) and with four independent sums so the adds do not wait on each other.
  const TokenOrder last_kept = dense_top_p(work, max_logit, top_p, probs);
  const auto keep = [&](std::size_t i) -> double {
    const float l = work[i];
    const bool tie_kept = (l == last_kept.logit) & (static_cast<std::int32_t>(i) <= last_kept.id);
    const bool kept = (l > last_kept.logit) | tie_kept;
    const float e = probs[i] * static_cast<float>(kept & (probs[i] >= min_p));  // e is finite
    probs[i] = e;
    return e;
  };
  double z0 = 0.0, z1 = 0.0, z2 = 0.0, z3 = 0.0;
  std::size_t i = 0;
  for (; i + 4 <= vocab; i += 4) {
    z0 += keep(i);
    z1 += keep(i + 1);
    z2 += keep(i + 2);
    z3 += keep(i + 3);
  }
  for (; i < vocab; ++i) z0 += keep(i);
  const double z = (z0 + z1) + (z2 + z3);
  for (float& e : probs) e = static_cast<float>(e / z);
}

RowSampler::TokenOrder RowSampler::dense_top_p(std::span<const float> work, float max_logit, float top_p,
                                               std::span<float> e) {
  const std::size_t vocab = e.size();
  TopPMass mass{};
  double z = 0.0;
  for (std::size_t i = 0; i < vocab; ++i) {
    const float x = std::exp(work[i] - max_logit);
    e[i] = x;
    mass[static_cast<std::size_t>(top_p_bucket(max_logit, work[i]))] += x;
    z += x;
  }
  const TopPCut cut = find_top_p_cut(mass, z, top_p);
  index_.resize(vocab);
  std::size_t n = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    const bool in_boundary = (top_p_bucket(max_logit, work[i]) == cut.bucket) & (e[i] > 0.0f);
    if (in_boundary) index_[n++] = static_cast<std::int32_t>(i);
  }
  const auto first = index_.begin();
  const auto end =
      cut_boundary_bucket(work, first, first + static_cast<std::ptrdiff_t>(n), cut.before, cut.target, e);
  BATON_CHECK(end != first, "top-p boundary bucket ", cut.bucket, " is empty");
  const auto last = static_cast<std::size_t>(*(end - 1));
  return TokenOrder{work[last], static_cast<std::int32_t>(last)};
}

std::vector<std::int32_t>::iterator RowSampler::cut_boundary_bucket(std::span<const float> work,
                                                                    std::vector<std::int32_t>::iterator first,
                                                                    std::vector<std::int32_t>::iterator last,
                                                                    double mass_before, double target,
                                                                    std::span<const float> e) {
  std::sort(first, last, [&](std::int32_t a, std::int32_t b) {
    const float la = work[static_cast<std::size_t>(a)], lb = work[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  // If rounding keeps the sum just short of the target, the whole bucket stays.
  double cum = mass_before;
  for (auto it = first; it != last; ++it) {
    cum += e[static_cast<std::size_t>(*it)];
    if (cum >= target) return it + 1;
  }
  return last;
}

std::size_t RowSampler::listed_top_p(std::span<const float> work, float max_logit, float top_p, std::span<float> e,
                                     std::size_t n) {
  const auto first = index_.begin();
  const auto last = first + static_cast<std::ptrdiff_t>(n);
  TopPMass mass{};
  double z = 0.0;
  for (auto it = first; it != last; ++it) {
    const auto i = static_cast<std::size_t>(*it);
    mass[static_cast<std::size_t>(top_p_bucket(max_logit, work[i]))] += e[i];
    z += e[i];
  }
  const TopPCut cut = find_top_p_cut(mass, z, top_p);
  const auto bucket_of = [&](std::int32_t t) { return top_p_bucket(max_logit, work[static_cast<std::size_t>(t)]); };
  const auto mid = std::partition(first, last, [&](std::int32_t t) { return bucket_of(t) < cut.bucket; });
  const auto far = std::partition(mid, last, [&](std::int32_t t) { return bucket_of(t) == cut.bucket; });
  const auto end = cut_boundary_bucket(work, mid, far, cut.before, cut.target, e);
  for (auto it = end; it != last; ++it) e[static_cast<std::size_t>(*it)] = 0.0f;
  return static_cast<std::size_t>(end - first);
}

std::int32_t RowSampler::draw(std::span<const float> probs, double u) {
  // cum first reaches u (> 0) at a token whose probability raised it, so zeros need no branch
  // (after top-p, zero or not is a coin flip per token).
  double cum = 0.0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (u <= cum) return static_cast<std::int32_t>(i);
  }
  for (std::size_t i = probs.size(); i-- > 0;) {
    if (probs[i] > 0.0f) return static_cast<std::int32_t>(i);
  }
  BATON_CHECK(false, "draw from a distribution of ", probs.size(), " entries with no positive probability");
  return 0;
}

}  // namespace baton::cpu
