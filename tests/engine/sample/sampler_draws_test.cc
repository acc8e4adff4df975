// Sampler draws: sample() is exactly draw(target_probs()), seeds and per-request streams, a
// chi-square test with negative controls, raw logprobs, and no allocation once warm.
#include "engine/sample/sampler.h"

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
#include <atomic>
#include <cstdlib>
#include <new>

#include "gtest/gtest.h"
#include "tests/engine/sample/sampler_reference.h"
#include "tests/support/chi_square.h"

// Counts heap allocations of this binary, to check that the sampler allocates nothing once warm.
// Not inlined, so that GCC does not pair a `new` expression with free() and warn.
namespace {
std::atomic<std::size_t> g_allocations{0};
}  // namespace

[[gnu::noinline]] void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace baton {
namespace {

using namespace ::baton::sampler_test;

using ::baton::testing::chi_square_p_value;

// ---------------------------------------------------------------------------------------------
// Draws: sample() is draw(target_probs()), seeds, chi-square

TEST(Sample, IsExactlyADrawFromTargetProbs) {
  Sampler s, t;
  std::mt19937 gen(7);
  for (int trial = 0; trial < 300; ++trial) {
    Case c{random_logits(1 + gen() % 3000, gen(), 2.5f), {}, {}, {}, {}};
    const auto v = static_cast<std::int32_t>(c.logits.size());
    c.params.temperature = std::vector<float>{0.0f, 0.5f, 1.0f, 1.7f}[gen() % 4];
    c.params.top_k = std::vector<std::int32_t>{0, 1, 20, v}[gen() % 4];
    c.params.top_p = std::vector<float>{1.0f, 0.6f, 0.95f}[gen() % 3];
    c.params.min_p = std::vector<float>{0.0f, 0.05f}[gen() % 2];
    c.params.repetition_penalty = 1.1f;
    c.output = {0, static_cast<std::int32_t>(gen() % c.logits.size())};
    const std::uint64_t seed = gen();
    RandomStream a(seed, RandomPurpose::kToken, 0), b(seed, RandomPurpose::kToken, 0);
    const std::int32_t sampled = s.sample(c.logits, c.params, c.history(), c.eos, a).token;
    const std::vector<float> p = target(t, c);
    const auto argmax = static_cast<std::int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
    const std::int32_t want = c.params.greedy() ? argmax : Sampler::draw(p, b);
    ASSERT_EQ(sampled, want) << "trial " << trial;
    ASSERT_GT(p[static_cast<std::size_t>(sampled)], 0.0f);
    ASSERT_EQ(a.uniform(), b.uniform()) << "sample() must draw exactly one uniform (none when greedy)";
  }
}

std::vector<std::int32_t> sampled_tokens(Sampler& s, std::uint64_t seed, int steps) {
  std::vector<std::int32_t> out;
  RandomStream rng(seed, RandomPurpose::kToken, 0);
  Case c{{}, {}, {1, 2, 3}, {}, {}};
  c.params.temperature = 0.9f;
  c.params.top_p = 0.95f;
  for (int i = 0; i < steps; ++i) {
    c.logits = random_logits(64, static_cast<std::uint32_t>(i), 1.0f);
    c.output = out;
    out.push_back(s.sample(c.logits, c.params, c.history(), c.eos, rng).token);
  }
  return out;
}

TEST(Seeds, SameSeedSameTokensDifferentSeedDifferentTokens) {
  Sampler s1, s2;
  const auto a = sampled_tokens(s1, 42, 200);
  EXPECT_EQ(a, sampled_tokens(s2, 42, 200));
  EXPECT_NE(a, sampled_tokens(s1, 43, 200));
}

TEST(Seeds, ARequestsDrawsIgnoreOtherRequestsInBetween) {
  Sampler alone;
  const auto expected = sampled_tokens(alone, 5, 100);

  // The same request interleaved with another (different vocab size, greedy and sampled steps,
  // logprobs) on one shared Sampler.
  Sampler shared;
  RandomStream mine(5, RandomPurpose::kToken, 0), other(6, RandomPurpose::kToken, 0);
  Case a{{}, {}, {1, 2, 3}, {}, {}};
  a.params.temperature = 0.9f;
  a.params.top_p = 0.95f;
  Case b{random_logits(5000, 9, 3.0f), {}, {4}, {}, {1}};
  b.params.top_k = 40;
  b.params.logprobs = 5;
  std::vector<std::int32_t> got;
  for (int i = 0; i < 100; ++i) {
    b.params.temperature = i % 3 == 0 ? 0.0f : 1.2f;
    shared.sample(b.logits, b.params, b.history(), b.eos, other);
    a.logits = random_logits(64, static_cast<std::uint32_t>(i), 1.0f);
    a.output = got;
    got.push_back(shared.sample(a.logits, a.params, a.history(), a.eos, mine).token);
  }
  EXPECT_EQ(got, expected);
}


// Goodness of fit of observed token counts to p over the tokens p keeps; a token outside the
// support that was drawn fails outright (p-value 0).
double goodness_of_fit(const std::vector<int>& counts, const std::vector<float>& p, int n) {
  double chi2 = 0.0;
  int df = -1;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0f) {
      if (counts[i] != 0) return 0.0;
      continue;
    }
    const double expected = n * static_cast<double>(p[i]);
    EXPECT_GE(expected, 5.0) << "chi-square needs >= 5 expected per cell";
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++df;
  }
  return chi_square_p_value(chi2, df);
}

constexpr double kSignificance = 1e-3;
constexpr int kDraws = 100000;

Case chi_square_case() {
  Case c{{1.2f, 0.3f, 2.0f, -0.5f, 1.9f, 0.8f, -3.0f, 1.5f, 0.0f, 1.0f}, {}, {3, 8}, {2, 2}, {}};
  c.params.temperature = 0.9f;
  c.params.top_k = 8;
  c.params.top_p = 0.95f;
  c.params.min_p = 0.05f;
  c.params.repetition_penalty = 1.1f;
  c.params.frequency_penalty = 0.1f;
  return c;
}

TEST(ChiSquare, SampleFollowsTargetProbs) {
  Sampler s;
  const Case c = chi_square_case();
  const std::vector<float> p = target(s, c);
  ASSERT_GE(count_nonzero(p), 4u);
  ASSERT_LT(count_nonzero(p), p.size());  // some tokens are cut, and must never be drawn
  std::vector<int> counts(p.size());
  RandomStream rng(123, RandomPurpose::kToken, 0);
  for (int i = 0; i < kDraws; ++i) {
    ++counts[static_cast<std::size_t>(s.sample(c.logits, c.params, c.history(), c.eos, rng).token)];
  }
  EXPECT_GT(goodness_of_fit(counts, p, kDraws), kSignificance);
}

TEST(ChiSquare, NegativeControlsAreDetected) {
  Sampler s;
  const Case c = chi_square_case();
  const std::vector<float> p = target(s, c);
  // 1% of the mass moved from the most to the least likely kept token.
  std::vector<float> skewed = p;
  const auto most = std::max_element(skewed.begin(), skewed.end());
  auto least = most;
  for (auto it = skewed.begin(); it != skewed.end(); ++it) {
    if (*it > 0.0f && *it < *least) least = it;
  }
  *most -= 0.01f;
  *least += 0.01f;
  std::vector<int> counts(p.size());
  RandomStream rng(123, RandomPurpose::kToken, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[static_cast<std::size_t>(Sampler::draw(skewed, rng))];
  EXPECT_LT(goodness_of_fit(counts, p, kDraws), kSignificance);

  // A sampler that forgot min-p and top-p: draws outside the support.
  Case loose = c;
  loose.params.top_p = 1.0f;
  loose.params.min_p = 0.0f;
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < kDraws; ++i) {
    ++counts[static_cast<std::size_t>(s.sample(loose.logits, loose.params, loose.history(), loose.eos, rng).token)];
  }
  EXPECT_LT(goodness_of_fit(counts, p, kDraws), kSignificance);
}

// ---------------------------------------------------------------------------------------------
// Logprobs

struct RefLogprobs {
  std::vector<double> lp;
  std::vector<std::int32_t> order;  // best first, lower id on ties
};

RefLogprobs reference_logprobs(const std::vector<float>& logits) {
  RefLogprobs r;
  long double z = 0.0L;  // direct sum in extended precision, after shifting by the max
  const double m = *std::max_element(logits.begin(), logits.end());
  for (float x : logits) z += std::exp(static_cast<long double>(x) - m);
  for (float x : logits) r.lp.push_back(static_cast<double>(static_cast<long double>(x) - m - std::log(z)));
  r.order.resize(logits.size());
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)];
  });
  return r;
}

TEST(Logprobs, RawLogSoftmaxIgnoresProcessing) {
  Sampler s;
  Case c{random_logits(1000, 21, 4.0f), {}, {5, 6}, {7}, {}};
  c.params.temperature = 0.5f;
  c.params.top_k = 5;
  c.params.repetition_penalty = 1.5f;
  c.params.presence_penalty = 1.0f;
  c.params.logprobs = 7;
  const RefLogprobs ref = reference_logprobs(c.logits);
  RandomStream rng(2, RandomPurpose::kToken, 0);
  for (int i = 0; i < 20; ++i) {
    const SampleResult r = s.sample(c.logits, c.params, c.history(), c.eos, rng);
    EXPECT_NEAR(r.logprob, ref.lp[static_cast<std::size_t>(r.token)], 1e-5);
    ASSERT_EQ(r.top.size(), 7u);
    for (std::size_t j = 0; j < 7; ++j) {
      EXPECT_EQ(r.top[j].token, ref.order[j]);
      EXPECT_NEAR(r.top[j].logprob, ref.lp[static_cast<std::size_t>(ref.order[j])], 1e-5);
    }
  }
  c.params.temperature = 0.0f;  // greedy also reports them
  const SampleResult g = s.sample(c.logits, c.params, c.history(), c.eos, rng);
  EXPECT_NEAR(g.logprob, ref.lp[static_cast<std::size_t>(g.token)], 1e-5);
}

TEST(Logprobs, StableForLargeLogitsAndTiesPutLowerIdsFirst) {
  const std::vector<float> logits = {1e4f, 1e4f - 1.0f, -1e4f, 1e4f, 1e4f - 1.0f};
  const SampleResult r = Sampler::raw_logprobs(logits, 2, 3);
  const double log_z = 1e4 + std::log(2.0 + 2.0 * std::exp(-1.0));
  EXPECT_NEAR(r.logprob, -1e4 - log_z, 1e-1);  // ~-2e4: float spacing there is ~0.002
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 0);
  EXPECT_EQ(r.top[1].token, 3);
  EXPECT_EQ(r.top[2].token, 1);
  EXPECT_NEAR(r.top[0].logprob, 1e4 - log_z, 1e-6);
  EXPECT_NEAR(r.top[2].logprob, 1e4 - 1.0 - log_z, 1e-6);
  EXPECT_EQ(Sampler::raw_logprobs(logits, 0, 50).top.size(), 5u);  // clamped to the vocabulary
}

TEST(Logprobs, ZeroGivesOnlyTheSampledTokenAndMinusOneNothing) {
  Sampler s;
  Case c{random_logits(30, 8, 1.0f), {}, {}, {}, {}};
  const RefLogprobs ref = reference_logprobs(c.logits);
  RandomStream rng(4, RandomPurpose::kToken, 0);
  c.params.logprobs = 0;
  SampleResult r = s.sample(c.logits, c.params, c.history(), c.eos, rng);
  EXPECT_TRUE(r.top.empty());
  EXPECT_NEAR(r.logprob, ref.lp[static_cast<std::size_t>(r.token)], 1e-6);
  c.params.logprobs = -1;
  r = s.sample(c.logits, c.params, c.history(), c.eos, rng);
  EXPECT_TRUE(r.top.empty());
  EXPECT_EQ(r.logprob, 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Scratch reuse

TEST(Scratch, NoAllocationOnceWarm) {
  Sampler s;
  Case c{random_logits(20000, 13, 2.0f), {}, {1, 2, 3, 3}, {4, 4, 5}, {6}};
  c.params.repetition_penalty = 1.2f;
  c.params.presence_penalty = 0.3f;
  c.params.frequency_penalty = 0.2f;
  c.params.min_tokens = 8;
  c.params.stop_token_ids = {7};
  std::vector<float> probs(c.logits.size());
  RandomStream rng(1, RandomPurpose::kToken, 0);
  const std::vector<std::pair<std::int32_t, float>> configs = {{0, 1.0f}, {50, 1.0f}, {0, 0.9f}, {50, 0.9f}};
  for (const auto& [k, p] : configs) {  // warm up every path
    c.params.top_k = k;
    c.params.top_p = p;
    s.sample(c.logits, c.params, c.history(), c.eos, rng);
    s.target_probs(c.logits, c.params, c.history(), c.eos, probs);
  }
  for (const auto& [k, p] : configs) {
    c.params.top_k = k;
    c.params.top_p = p;
    for (std::int32_t logprobs : {-1, 0}) {
      c.params.logprobs = logprobs;
      const std::size_t before = g_allocations.load();
      s.sample(c.logits, c.params, c.history(), c.eos, rng);
      s.target_probs(c.logits, c.params, c.history(), c.eos, probs);
      c.params.temperature = 0.0f;
      s.sample(c.logits, c.params, c.history(), c.eos, rng);
      c.params.temperature = 1.0f;
      const std::size_t after = g_allocations.load();
      EXPECT_EQ(after - before, 0u) << "top_k " << k << " top_p " << p << " logprobs " << logprobs;
    }
  }
}

}  // namespace
}  // namespace baton
