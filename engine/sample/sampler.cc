#include "engine/sample/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "common/status.h"
#include "kernels/cpu/argmax.h"

namespace baton {
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

std::size_t checked_token(std::int32_t token, std::size_t vocab) {
  BATON_CHECK(token >= 0 && static_cast<std::size_t>(token) < vocab, "token id ", token,
              " in the request history is outside the vocabulary [0, ", vocab, ")");
  return static_cast<std::size_t>(token);
}

}  // namespace

void Sampler::load_logits(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                          std::span<const std::int32_t> eos_token_ids, bool mask_stops) {
  const std::size_t vocab = logits.size();
  work_.assign(logits.begin(), logits.end());
  if (counts_.size() != vocab) counts_.assign(vocab, 0);

  if (params.repetition_penalty != 1.0f) {
    const float r = params.repetition_penalty;
    // counts_ marks tokens already penalized so each distinct token is penalized once.
    for (std::span<const std::int32_t> tokens : {history.prompt, history.output}) {
      for (std::int32_t t : tokens) {
        const std::size_t i = checked_token(t, vocab);
        if (counts_[i] != 0) continue;
        counts_[i] = 1;
        work_[i] = work_[i] > 0.0f ? work_[i] / r : work_[i] * r;
      }
    }
    for (std::span<const std::int32_t> tokens : {history.prompt, history.output}) {
      for (std::int32_t t : tokens) counts_[static_cast<std::size_t>(t)] = 0;
    }
  }

  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    for (std::int32_t t : history.output) ++counts_[checked_token(t, vocab)];
    // The first visit of each distinct token applies its penalty and clears its count.
    for (std::int32_t t : history.output) {
      const auto i = static_cast<std::size_t>(t);
      if (counts_[i] == 0) continue;
      work_[i] -= params.frequency_penalty * static_cast<float>(counts_[i]);
      work_[i] -= params.presence_penalty;
      counts_[i] = 0;
    }
  }

  if (mask_stops && history.output.size() < static_cast<std::size_t>(std::max(params.min_tokens, 0))) {
    for (std::int32_t t : params.stop_token_ids) {
      if (t >= 0 && static_cast<std::size_t>(t) < vocab) work_[static_cast<std::size_t>(t)] = kNegInf;
    }
    if (!params.ignore_eos) {
      for (std::int32_t t : eos_token_ids) {
        if (t >= 0 && static_cast<std::size_t>(t) < vocab) work_[static_cast<std::size_t>(t)] = kNegInf;
      }
    }
  }
}

std::size_t Sampler::argmax() const {
  const std::optional<std::size_t> best = cpu::argmax_lowest(work_);
  BATON_CHECK(best.has_value(), "NaN in the logits row (vocab ", work_.size(), ")");
  return *best;
}

bool Sampler::needs_history(const SamplingParams& params, std::size_t output_len) {
  const bool penalties =
      params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  const bool masks_stops = output_len < static_cast<std::size_t>(std::max(params.min_tokens, 0));
  return penalties || masks_stops;
}

std::int32_t Sampler::greedy_token(std::span<const float> logits, const SamplingParams& params,
                                   const TokenHistory& history, std::span<const std::int32_t> eos_token_ids) {
  const std::size_t vocab = logits.size();
  BATON_CHECK(vocab > 0, "empty logits row");
  if (takes_raw_argmax(params, history.output.size())) {
    // Nothing to process: the argmax of the logits as they are (no copy).
    const std::optional<std::size_t> best = cpu::argmax_lowest(logits);
    BATON_CHECK(best.has_value(), "NaN in the logits row (vocab ", vocab, ")");
    BATON_CHECK(logits[*best] > kNegInf, "logits row has no finite entry (vocab ", vocab, ")");
    return static_cast<std::int32_t>(*best);
  }
  // If min_tokens masked every token (stop_token_ids covering the vocabulary), the request cannot
  // be honoured: min_tokens is ignored rather than choosing from nothing.
  load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/true);
  std::size_t best = argmax();
  if (work_[best] == kNegInf) {
    load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/false);
    best = argmax();
  }
  BATON_CHECK(work_[best] > kNegInf, "logits row has no finite entry (vocab ", vocab, ")");
  return static_cast<std::int32_t>(best);
}

float Sampler::scale_and_max(float temperature) {
  float max_logit = kNegInf;
  bool any_nan = false;
  for (float& x : work_) {
    x /= temperature;
    max_logit = x > max_logit ? x : max_logit;
    any_nan |= std::isnan(x);
  }
  BATON_CHECK(!any_nan, "NaN in the logits row (vocab ", work_.size(), ")");
  return max_logit;
}

// Selects the k-th largest of work_ (0 < k < vocab), using `scratch` ([vocab]) as workspace.
float Sampler::kth_largest(std::size_t k, std::span<float> scratch) const {
  if (k <= kTopKHeapMax) {
    // A min-heap of the k largest so far: one pass, and few pushes on a shuffled vocabulary.
    const auto heap = scratch.begin();
    std::copy(work_.begin(), work_.begin() + static_cast<std::ptrdiff_t>(k), heap);
    const auto heap_end = heap + static_cast<std::ptrdiff_t>(k);
    std::make_heap(heap, heap_end, std::greater<float>());
    for (std::size_t i = k; i < work_.size(); ++i) {
      if (work_[i] > *heap) {
        std::pop_heap(heap, heap_end, std::greater<float>());
        *(heap_end - 1) = work_[i];
        std::push_heap(heap, heap_end, std::greater<float>());
      }
    }
    return *heap;
  }
  std::copy(work_.begin(), work_.end(), scratch.begin());
  const auto kth = scratch.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(scratch.begin(), kth, scratch.end(), std::greater<float>());
  return *kth;
}

std::int32_t Sampler::process(std::span<const float> logits, const SamplingParams& params,
                              const TokenHistory& history, std::span<const std::int32_t> eos_token_ids,
                              std::span<float> probs) {
  const std::size_t vocab = logits.size();
  BATON_CHECK(vocab > 0, "empty logits row");
  BATON_CHECK(probs.size() == vocab, "probs has ", probs.size(), " entries for a vocabulary of ", vocab);
  if (params.greedy()) {
    const std::int32_t best = greedy_token(logits, params, history, eos_token_ids);
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[static_cast<std::size_t>(best)] = 1.0f;
    return best;
  }
  // If min_tokens masked every token (stop_token_ids covering the vocabulary), the request cannot
  // be honoured: min_tokens is ignored rather than sampling from nothing.
  load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/true);

  float max_logit = scale_and_max(params.temperature);
  if (max_logit == kNegInf) {
    load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/false);
    max_logit = scale_and_max(params.temperature);
  }
  BATON_CHECK(std::isfinite(max_logit), "logits row max is ", max_logit, " after temperature ",
              params.temperature, " (vocab ", vocab, ")");

  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab) {
    // A short list: probs holds e = exp(logit - max) (fp32) on the top-k set, 0 elsewhere, and
    // index_[0, n) lists the tokens with e > 0.
    const float threshold = kth_largest(static_cast<std::size_t>(params.top_k), probs);
    index_.resize(vocab);
    std::size_t n = 0;
    for (std::size_t i = 0; i < vocab; ++i) {
      const float e = work_[i] >= threshold ? std::exp(work_[i] - max_logit) : 0.0f;
      probs[i] = e;
      if (e > 0.0f) index_[n++] = static_cast<std::int32_t>(i);
    }
    if (params.top_p < 1.0f) n = listed_top_p(max_logit, params.top_p, probs, n);
    double z = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      float& e = probs[static_cast<std::size_t>(index_[j])];
      if (e < params.min_p) e = 0.0f;
      z += e;
    }
    for (std::size_t j = 0; j < n; ++j) {
      float& e = probs[static_cast<std::size_t>(index_[j])];
      e = static_cast<float>(e / z);
    }
    return -1;
  }

  if (params.top_p >= 1.0f) {  // only min-p: one pass, then normalization
    double z = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) {
      const float e = std::exp(work_[i] - max_logit);
      probs[i] = e * static_cast<float>(e >= params.min_p);
      z += probs[i];
    }
    for (float& e : probs) e = static_cast<float>(e / z);
    return -1;
  }
  // Top-p keeps a prefix of the order (logit descending, id ascending): everything up to and
  // including `last_kept`. Then min-p and normalization, branch-free (kept or not is a coin flip
  // per token) and with four independent sums so the adds do not wait on each other.
  const TokenOrder last_kept = dense_top_p(max_logit, params.top_p, probs);
  const auto keep = [&](std::size_t i) -> double {
    const float l = work_[i];
    const bool tie_kept = (l == last_kept.logit) & (static_cast<std::int32_t>(i) <= last_kept.id);
    const bool kept = (l > last_kept.logit) | tie_kept;
    const float e = probs[i] * static_cast<float>(kept & (probs[i] >= params.min_p));  // e is finite
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
  return -1;
}

Sampler::TokenOrder Sampler::dense_top_p(float max_logit, float top_p, std::span<float> e) {
  const std::size_t vocab = e.size();
  TopPMass mass{};
  double z = 0.0;
  for (std::size_t i = 0; i < vocab; ++i) {
    const float x = std::exp(work_[i] - max_logit);
    e[i] = x;
    mass[static_cast<std::size_t>(top_p_bucket(max_logit, work_[i]))] += x;
    z += x;
  }
  const TopPCut cut = find_top_p_cut(mass, z, top_p);
  index_.resize(vocab);
  std::size_t n = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    const bool in_boundary = (top_p_bucket(max_logit, work_[i]) == cut.bucket) & (e[i] > 0.0f);
    if (in_boundary) index_[n++] = static_cast<std::int32_t>(i);
  }
  const auto first = index_.begin();
  const auto end = cut_boundary_bucket(first, first + static_cast<std::ptrdiff_t>(n), cut.before, cut.target, e);
  BATON_CHECK(end != first, "top-p boundary bucket ", cut.bucket, " is empty");
  const auto last = static_cast<std::size_t>(*(end - 1));
  return TokenOrder{work_[last], static_cast<std::int32_t>(last)};
}

std::vector<std::int32_t>::iterator Sampler::cut_boundary_bucket(std::vector<std::int32_t>::iterator first,
                                                                 std::vector<std::int32_t>::iterator last,
                                                                 double mass_before, double target,
                                                                 std::span<const float> e) const {
  std::sort(first, last, [&](std::int32_t a, std::int32_t b) {
    const float la = work_[static_cast<std::size_t>(a)], lb = work_[static_cast<std::size_t>(b)];
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

std::size_t Sampler::listed_top_p(float max_logit, float top_p, std::span<float> e, std::size_t n) {
  const auto first = index_.begin();
  const auto last = first + static_cast<std::ptrdiff_t>(n);
  TopPMass mass{};
  double z = 0.0;
  for (auto it = first; it != last; ++it) {
    const auto i = static_cast<std::size_t>(*it);
    mass[static_cast<std::size_t>(top_p_bucket(max_logit, work_[i]))] += e[i];
    z += e[i];
  }
  const TopPCut cut = find_top_p_cut(mass, z, top_p);
  const auto bucket_of = [&](std::int32_t t) { return top_p_bucket(max_logit, work_[static_cast<std::size_t>(t)]); };
  const auto mid = std::partition(first, last, [&](std::int32_t t) { return bucket_of(t) < cut.bucket; });
  const auto far = std::partition(mid, last, [&](std::int32_t t) { return bucket_of(t) == cut.bucket; });
  const auto end = cut_boundary_bucket(mid, far, cut.before, cut.target, e);
  for (auto it = end; it != last; ++it) e[static_cast<std::size_t>(*it)] = 0.0f;
  return static_cast<std::size_t>(end - first);
}

void Sampler::target_probs(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                           std::span<const std::int32_t> eos_token_ids, std::span<float> probs) {
  process(logits, params, history, eos_token_ids, probs);
}

SampleResult Sampler::sample(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                             std::span<const std::int32_t> eos_token_ids, RandomStream& rng) {
  std::int32_t token = 0;
  if (params.greedy()) {
    token = greedy_token(logits, params, history, eos_token_ids);  // no distribution to write
  } else {
    probs_.resize(logits.size());
    const std::int32_t argmax = process(logits, params, history, eos_token_ids, probs_);
    token = argmax >= 0 ? argmax : draw(probs_, rng);
  }
  if (params.logprobs < 0) {
    SampleResult result;
    result.token = token;
    return result;
  }
  return raw_logprobs(logits, token, params.logprobs);
}

std::int32_t Sampler::draw(std::span<const float> probs, RandomStream& rng) {
  const double u = rng.uniform();
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

SampleResult Sampler::raw_logprobs(std::span<const float> logits, std::int32_t token, std::int32_t top_n) {
  BATON_CHECK(token >= 0 && static_cast<std::size_t>(token) < logits.size(), "token ", token,
              " outside the vocabulary of ", logits.size());
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float x : logits) max_logit = std::max(max_logit, static_cast<double>(x));
  BATON_CHECK(std::isfinite(max_logit), "raw logits row max is ", max_logit);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_z = max_logit + std::log(sum);

  SampleResult result;
  result.token = token;
  result.logprob = static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(token)]) - log_z);
  const auto n = static_cast<std::size_t>(std::clamp(top_n, 0, static_cast<std::int32_t>(logits.size())));
  if (n == 0) return result;
  // Insertion into a best-first list of at most n: ids ascend, so a later token passes an equal one
  // never, and ties keep the lower id first.
  result.top.reserve(n + 1);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (result.top.size() == n && !(x > logits[static_cast<std::size_t>(result.top.back().token)])) continue;
    auto pos = result.top.end();
    while (pos != result.top.begin() && x > logits[static_cast<std::size_t>((pos - 1)->token)]) --pos;
    result.top.insert(pos, TokenLogprob{static_cast<std::int32_t>(i), 0.0f});
    if (result.top.size() > n) result.top.pop_back();
  }
  for (TokenLogprob& t : result.top) {
    t.logprob = static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(t.token)]) - log_z);
  }
  return result;
}

}  // namespace baton
