// Test-side reference for the sampler tests: the processing rules recomputed the obvious way
// (reference_probs: full sorts, fp32 logits and exp as the spec says, sums in double), the Case a
// test feeds to Sampler, and small helpers to compare distributions. Test-only: nothing here is
// used by the engine, and it must stay a plain restatement of the rules, not a copy of sampler.cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/sample/sampler.h"
#include "gtest/gtest.h"

namespace baton::sampler_test {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

inline std::vector<float> random_logits(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

struct Case {
  std::vector<float> logits;
  SamplingParams params;
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> output;
  std::vector<std::int32_t> eos;
  TokenHistory history() const { return TokenHistory{prompt, output}; }
};

// The processing rules, written the obvious way. Logits stay fp32 through penalties and
// temperature, and exp(logit - max) is taken in fp32 ("softmax in fp32"), as the engine does;
// sums, cumulative sums and normalization are in double. Fails the calling test if the data lies
// so close to a top-p boundary that the order of double additions could decide membership.
inline std::vector<double> reference_probs(const Case& c) {
  const SamplingParams& p = c.params;
  std::vector<float> l = c.logits;
  const std::size_t vocab = l.size();
  for (const auto& [t, bias] : p.logit_bias) l[static_cast<std::size_t>(t)] += bias;  // first of all
  if (p.repetition_penalty != 1.0f) {
    std::set<std::int32_t> seen(c.prompt.begin(), c.prompt.end());
    seen.insert(c.output.begin(), c.output.end());
    for (std::int32_t t : seen) {
      float& x = l[static_cast<std::size_t>(t)];
      x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    }
  }
  std::map<std::int32_t, int> counts;
  for (std::int32_t t : c.output) ++counts[t];
  for (const auto& [t, n] : counts) {
    l[static_cast<std::size_t>(t)] -= p.frequency_penalty * static_cast<float>(n);
    l[static_cast<std::size_t>(t)] -= p.presence_penalty;
  }
  if (static_cast<std::int32_t>(c.output.size()) < p.min_tokens) {
    for (std::int32_t t : p.stop_token_ids) l[static_cast<std::size_t>(t)] = -kInf;
    if (!p.ignore_eos) {
      for (std::int32_t t : c.eos) {
        if (t >= 0 && static_cast<std::size_t>(t) < vocab) l[static_cast<std::size_t>(t)] = -kInf;
      }
    }
  }
  std::vector<double> out(vocab, 0.0);
  if (p.greedy()) {
    out[static_cast<std::size_t>(std::max_element(l.begin(), l.end()) - l.begin())] = 1.0;
    return out;
  }
  for (float& x : l) x /= p.temperature;

  std::vector<std::int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return l[static_cast<std::size_t>(a)] > l[static_cast<std::size_t>(b)] ||
           (l[static_cast<std::size_t>(a)] == l[static_cast<std::size_t>(b)] && a < b);
  });
  std::vector<bool> kept(vocab);
  for (std::size_t i = 0; i < vocab; ++i) kept[i] = l[i] > -kInf;
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    const float kth = l[static_cast<std::size_t>(order[static_cast<std::size_t>(p.top_k - 1)])];
    for (std::size_t i = 0; i < vocab; ++i) kept[i] = kept[i] && l[i] >= kth;
  }
  const float max_logit = l[static_cast<std::size_t>(order[0])];
  std::vector<double> e(vocab);
  for (std::size_t i = 0; i < vocab; ++i) e[i] = std::exp(l[i] - max_logit);
  if (p.top_p < 1.0f) {
    double z = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) z += kept[i] ? e[i] : 0.0;
    const double target = p.top_p * z;
    double cum = 0.0;
    bool done = false;
    for (std::int32_t t : order) {
      const auto i = static_cast<std::size_t>(t);
      if (!kept[i]) continue;
      if (done) {
        kept[i] = false;
        continue;
      }
      cum += e[i];
      EXPECT_GT(std::fabs(cum - target), 1e-12 * z) << "test data on a top-p knife edge; change the seed";
      done = cum >= target;
    }
  }
  if (p.min_p > 0.0f) {
    for (std::size_t i = 0; i < vocab; ++i) kept[i] = kept[i] && e[i] >= p.min_p;
  }
  double z = 0.0;
  for (std::size_t i = 0; i < vocab; ++i) z += kept[i] ? e[i] : 0.0;
  for (std::size_t i = 0; i < vocab; ++i) out[i] = kept[i] ? e[i] / z : 0.0;  // fp32 underflow: kept at 0
  return out;
}

inline std::vector<float> target(Sampler& s, const Case& c) {
  std::vector<float> probs(c.logits.size(), -1.0f);
  s.target_probs(c.logits, c.params, c.history(), c.eos, probs);
  return probs;
}

inline void expect_matches_reference(Sampler& s, const Case& c, const std::string& what) {
  const std::vector<double> ref = reference_probs(c);
  const std::vector<float> got = target(s, c);
  double sum = 0.0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    sum += got[i];
    const bool ok = (got[i] == 0.0f) == (ref[i] == 0.0) && std::fabs(got[i] - ref[i]) <= 1e-6 + 1e-5 * ref[i];
    if (!ok && ++mismatches <= 5) ADD_FAILURE() << what << ": token " << i << " got " << got[i] << " want " << ref[i];
  }
  EXPECT_EQ(mismatches, 0u) << what;
  EXPECT_NEAR(sum, 1.0, 1e-5) << what;
}

inline std::size_t count_nonzero(const std::vector<float>& v) {
  return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [](float x) { return x != 0.0f; }));
}

inline std::vector<float> softmax(const std::vector<double>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  double z = 0.0;
  for (double x : l) z += std::exp(x - m);
  std::vector<float> out;
  for (double x : l) out.push_back(static_cast<float>(std::exp(x - m) / z));
  return out;
}

inline void expect_probs_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

}  // namespace baton::sampler_test
