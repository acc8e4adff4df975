#include "engine/sample/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>

#include "common/status.h"

namespace baton {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Top-p prefilter: tokens are bucketed by how far (in nats, after temperature) their logit lies
// below the max. Every token of a nearer bucket outranks every token of a farther one, so the
// kept prefix is whole buckets plus a sorted prefix of one boundary bucket; only that bucket is
// sorted. The last bucket takes everything farther away.
constexpr int kTopPBuckets = 64;
constexpr float kTopPBucketsPerNat = 2.0f;
constexpr float kTopPMaxGap = (kTopPBuckets - 1) / kTopPBucketsPerNat;

int top_p_bucket(float max_logit, float logit) {
  const float gap = max_logit - logit;  // >= 0
  return gap >= kTopPMaxGap ? kTopPBuckets - 1 : static_cast<int>(gap * kTopPBucketsPerNat);
}

std::size_t checked_token(std::int32_t token, std::size_t vocab) {
  BATON_CHECK(token >= 0 && static_cast<std::size_t>(token) < vocab, "token id ", token,
              " in the request history is outside the vocabulary [0, ", vocab, ")");
  return static_cast<std::size_t>(token);
}

}  // namespace

double RequestRng::uniform() {
  // 53 random bits k in [0, 2^53) map to (k + 1) / 2^53 in (0, 1].
  return static_cast<double>((gen_() >> 11) + 1) * 0x1.0p-53;
}

bool Sampler::load_logits(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
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

  bool any_finite = false;
  for (float x : work_) {
    BATON_CHECK(!std::isnan(x), "NaN in the logits row");
    any_finite |= x > kNegInf;
  }
  return any_finite;
}

void Sampler::process(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                      std::span<const std::int32_t> eos_token_ids, std::span<float> probs) {
  const std::size_t vocab = logits.size();
  BATON_CHECK(vocab > 0, "empty logits row");
  BATON_CHECK(probs.size() == vocab, "probs has ", probs.size(), " entries for a vocabulary of ", vocab);
  if (!load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/true)) {
    // min_tokens masked every token (stop_token_ids covering the vocabulary): the request cannot
    // be honoured, so ignore min_tokens rather than sample from nothing.
    BATON_CHECK(load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/false),
                "logits row has no finite entry (vocab ", vocab, ")");
  }

  std::fill(probs.begin(), probs.end(), 0.0f);
  if (params.greedy()) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < vocab; ++i) {
      if (work_[i] > work_[best]) best = i;
    }
    probs[best] = 1.0f;
    return;
  }

  const float temperature = params.temperature;
  float max_logit = kNegInf;
  for (float& x : work_) {
    x /= temperature;
    max_logit = std::max(max_logit, x);
  }
  BATON_CHECK(std::isfinite(max_logit), "logits row max is ", max_logit, " after temperature ", temperature);

  const bool top_k_on = params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab;
  const bool top_p_on = params.top_p < 1.0f;
  const float min_p = params.min_p;

  if (!top_k_on && !top_p_on) {
    // Every finite token is a candidate: no index list, one dense pass.
    double z = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) {
      const float e = std::exp(work_[i] - max_logit);
      if (e > 0.0f && e >= min_p) {
        probs[i] = e;
        z += e;
      }
    }
    for (float& p : probs) p = static_cast<float>(p / z);
    return;
  }

  index_.resize(vocab);
  std::size_t n = 0;
  if (top_k_on) {
    // The k-th largest value, found by selection in probs (used as scratch; cleared below).
    std::copy(work_.begin(), work_.end(), probs.begin());
    const auto kth = probs.begin() + (params.top_k - 1);
    std::nth_element(probs.begin(), kth, probs.end(), std::greater<float>());
    const float threshold = *kth;
    std::fill(probs.begin(), probs.end(), 0.0f);
    for (std::size_t i = 0; i < vocab; ++i) {
      if (work_[i] >= threshold && work_[i] > kNegInf) index_[n++] = static_cast<std::int32_t>(i);
    }
  } else {
    for (std::size_t i = 0; i < vocab; ++i) {
      if (work_[i] > kNegInf) index_[n++] = static_cast<std::int32_t>(i);
    }
  }
  if (top_p_on) n = apply_top_p(max_logit, params.top_p, n);

  double z = 0.0;
  std::size_t kept = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const auto i = static_cast<std::size_t>(index_[j]);
    const float e = std::exp(work_[i] - max_logit);
    if (e > 0.0f && e >= min_p) {
      probs[i] = e;
      z += e;
      index_[kept++] = index_[j];
    }
  }
  for (std::size_t j = 0; j < kept; ++j) {
    const auto i = static_cast<std::size_t>(index_[j]);
    probs[i] = static_cast<float>(probs[i] / z);
  }
}

std::size_t Sampler::apply_top_p(float max_logit, float top_p, std::size_t n) {
  std::array<double, kTopPBuckets> mass{};
  double z = 0.0;
  for (std::size_t j = 0; j < n; ++j) {
    const float l = work_[static_cast<std::size_t>(index_[j])];
    const float e = std::exp(l - max_logit);
    mass[static_cast<std::size_t>(top_p_bucket(max_logit, l))] += e;
    z += e;
  }
  const double target = static_cast<double>(top_p) * z;
  int boundary = kTopPBuckets - 1;
  double before = 0.0;  // mass of the buckets nearer than `boundary`
  for (int b = 0; b < kTopPBuckets; ++b) {
    if (before + mass[static_cast<std::size_t>(b)] >= target) {
      boundary = b;
      break;
    }
    before += mass[static_cast<std::size_t>(b)];
  }

  const auto first = index_.begin();
  const auto bucket_of = [&](std::int32_t t) { return top_p_bucket(max_logit, work_[static_cast<std::size_t>(t)]); };
  const auto mid = std::partition(first, first + static_cast<std::ptrdiff_t>(n),
                                  [&](std::int32_t t) { return bucket_of(t) < boundary; });
  const auto last = std::partition(mid, first + static_cast<std::ptrdiff_t>(n),
                                   [&](std::int32_t t) { return bucket_of(t) == boundary; });
  std::sort(mid, last, [&](std::int32_t a, std::int32_t b) {
    const float la = work_[static_cast<std::size_t>(a)], lb = work_[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  // If rounding keeps the sum just short of the target, the whole boundary bucket stays.
  auto end = last;
  double cum = before;
  for (auto it = mid; it != last; ++it) {
    cum += std::exp(work_[static_cast<std::size_t>(*it)] - max_logit);
    if (cum >= target) {
      end = it + 1;
      break;
    }
  }
  return static_cast<std::size_t>(end - first);
}

void Sampler::target_probs(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                           std::span<const std::int32_t> eos_token_ids, std::span<float> probs) {
  process(logits, params, history, eos_token_ids, probs);
}

SampleResult Sampler::sample(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                             std::span<const std::int32_t> eos_token_ids, RequestRng& rng) {
  probs_.resize(logits.size());
  process(logits, params, history, eos_token_ids, probs_);
  std::int32_t token = 0;
  if (params.greedy()) {
    token = static_cast<std::int32_t>(std::find(probs_.begin(), probs_.end(), 1.0f) - probs_.begin());
  } else {
    token = draw(probs_, rng);
  }
  if (params.logprobs < 0) {
    SampleResult result;
    result.token = token;
    return result;
  }
  return raw_logprobs(logits, token, params.logprobs);
}

std::int32_t Sampler::draw(std::span<const float> probs, RequestRng& rng) {
  const double u = rng.uniform();
  double cum = 0.0;
  std::size_t last_positive = probs.size();
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (!(probs[i] > 0.0f)) continue;
    cum += probs[i];
    last_positive = i;
    if (u <= cum) return static_cast<std::int32_t>(i);
  }
  BATON_CHECK(last_positive < probs.size(), "draw from a distribution of ", probs.size(),
              " entries with no positive probability");
  return static_cast<std::int32_t>(last_positive);
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
