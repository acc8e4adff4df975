// Entropy verification (rejection_sampler_config.enable_entropy_verify), which is lossy by design:
// the threshold's formula; threshold 1 reduces to the lossless rules bit for bit; greedy requests
// never change; and over 100k seeded trials the emitted token follows the entropy rule's own law
// (chi-square goodness of fit) and not the target's — the test that shows the deployment lossy.
// One-hot drafts stay coupled to plain sampling: a token differs from plain sampling's only where
// the rule accepted a draft plain sampling would not have emitted.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/spec/rejection_sampler.h"
#include "gtest/gtest.h"
#include "tests/support/chi_square.h"

namespace baton {
namespace {

using ::baton::testing::chi_square_p_value;

constexpr int kTrials = 100000;
constexpr double kSignificance = 1e-4;

const std::vector<float> kTarget = {0.35f, 0.2f, 0.15f, 0.12f, 0.1f, 0.08f};  // p, vocab 6
const std::vector<float> kDraft = {0.1f, 0.4f, 0.2f, 0.1f, 0.1f, 0.1f};       // q

double goodness_of_fit(const std::vector<int>& counts, const std::vector<double>& law) {
  double chi2 = 0.0;
  int df = -1;
  for (std::size_t i = 0; i < law.size(); ++i) {
    if (law[i] == 0.0) {
      if (counts[i] != 0) return 0.0;
      continue;
    }
    const double expected = kTrials * law[i];
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++df;
  }
  return chi_square_p_value(chi2, df);
}

// The first token a verification emits: the first draft if accepted, else the correction.
std::int32_t first_token(const VerifyResult& r, const std::vector<std::int32_t>& drafts) {
  return r.num_accepted > 0 ? drafts[0] : r.next_token;
}

std::vector<float> rows(const std::vector<float>& row, int n) {
  std::vector<float> out;
  for (int i = 0; i < n; ++i) out.insert(out.end(), row.begin(), row.end());
  return out;
}

TEST(EntropyVerification, ThresholdIsTheCappedExponentialOfTheScaledEntropy) {
  const std::vector<float> uniform(4, 0.25f);
  const std::vector<float> one_hot = {0.0f, 1.0f, 0.0f, 0.0f};
  const EntropyVerification e{true, 0.95, 0.4};
  EXPECT_NEAR(entropy_threshold(uniform, e), std::pow(4.0, -0.4), 1e-9);  // H = ln 4 nats
  EXPECT_NEAR(entropy_threshold(one_hot, e), 0.95, 1e-9);                 // H = 0: capped by the threshold
  EXPECT_NEAR(entropy_threshold(uniform, EntropyVerification{true, 0.5, 0.0}), 0.5, 1e-12);
  EXPECT_NEAR(entropy_threshold(uniform, EntropyVerification{true, 1.0, 1.0}), 0.25, 1e-9);
}

// Threshold 1 and alpha 0 make t = 1 everywhere: every rule must then give the lossless result.
TEST(EntropyVerification, ThresholdOneIsTheLosslessRule) {
  const EntropyVerification t1{true, 1.0, 0.0};
  const std::vector<std::int32_t> drafts = {1, 0, 2};
  const std::vector<float> p = rows(kTarget, 4), q = rows(kDraft, 3);
  for (const bool one_hot : {true, false}) {
    for (std::uint64_t seed = 0; seed < 3000; ++seed) {
      VerifyInput in;
      in.vocab_size = 6;
      in.drafts = drafts;
      in.target_probs = p;
      if (!one_hot) in.draft_probs = q;
      const VerifyRandomness random{seed, 17};
      const VerifyResult plain = verify_standard(in, random), plain_block = verify_block(in, random);
      in.entropy = &t1;
      const VerifyResult entropy = verify_standard(in, random), entropy_block = verify_block(in, random);
      ASSERT_EQ(plain.num_accepted, entropy.num_accepted) << "seed " << seed;
      ASSERT_EQ(plain.next_token, entropy.next_token) << "seed " << seed;
      ASSERT_EQ(plain_block.num_accepted, entropy_block.num_accepted) << "seed " << seed;
      ASSERT_EQ(plain_block.next_token, entropy_block.next_token) << "seed " << seed;
    }
  }
}

TEST(EntropyVerification, GreedyRequestsAreNotAffected) {
  const EntropyVerification loose{true, 0.95, 100.0};  // t tiny: every sampled draft would pass
  const std::vector<std::int32_t> drafts = {1, 1};
  const std::vector<float> p = rows(kTarget, 3);
  VerifyInput in;
  in.vocab_size = 6;
  in.drafts = drafts;
  in.target_probs = p;
  in.greedy = true;
  in.entropy = &loose;
  const VerifyResult r = verify_standard(in, VerifyRandomness{1, 0});
  EXPECT_EQ(r.num_accepted, 0);  // the argmax is token 0
  EXPECT_EQ(r.next_token, 0);
}

// One-hot draft x: accepted with probability a = min(p(x) / t, 1); otherwise plain sampling's own
// draw, which is then p without x.
TEST(EntropyVerification, OneHotDraftsFollowTheEntropyLawNotTheTargets) {
  const EntropyVerification e{true, 0.95, 0.4};
  const std::int32_t x = 1;
  const std::vector<std::int32_t> drafts = {x};
  const std::vector<float> p = rows(kTarget, 2);
  const double t = entropy_threshold(kTarget, e);
  const double a = std::min(kTarget[x] / t, 1.0);
  std::vector<double> law(kTarget.size()), target(kTarget.begin(), kTarget.end());
  for (std::size_t y = 0; y < law.size(); ++y) {
    law[y] = static_cast<int>(y) == x ? a : (1.0 - a) * kTarget[y] / (1.0 - kTarget[x]);
  }
  for (const bool block : {false, true}) {
    std::vector<int> counts(kTarget.size(), 0);
    int uncoupled = 0;  // trials whose token differs from plain sampling's without being the draft
    for (int trial = 0; trial < kTrials; ++trial) {
      VerifyInput in;
      in.vocab_size = 6;
      in.drafts = drafts;
      in.target_probs = p;
      in.entropy = &e;
      const VerifyRandomness random{static_cast<std::uint64_t>(trial), 40};
      const VerifyResult r = block ? verify_block(in, random) : verify_standard(in, random);
      const std::int32_t tok = first_token(r, drafts);
      ++counts[static_cast<std::size_t>(tok)];
      RandomStream plain = token_stream(random.seed, random.position);
      const std::int32_t y = Sampler::draw(kTarget, plain);
      uncoupled += tok != y && tok != x;
    }
    EXPECT_GT(goodness_of_fit(counts, law), kSignificance) << (block ? "block" : "standard");
    EXPECT_LT(goodness_of_fit(counts, target), 1e-9) << "the entropy rule must be measurably lossy here";
    EXPECT_EQ(uncoupled, 0);
  }
}

// Probabilistic drafts (x ~ q): accepted iff u t <= p(x) / q(x); a rejection draws from
// normalize(max(p - q, 0)). The first token's law: q(z) min(p(z) / (t q(z)), 1) + (1 - beta) r(z).
TEST(EntropyVerification, ProbabilisticDraftsFollowTheEntropyLaw) {
  const EntropyVerification e{true, 0.95, 0.4};
  const double t = entropy_threshold(kTarget, e);
  const std::size_t v = kTarget.size();
  std::vector<double> accept(v), residual(v), law(v);
  double beta = 0.0, mass = 0.0;
  for (std::size_t z = 0; z < v; ++z) {
    accept[z] = kDraft[z] * std::min(kTarget[z] / (t * kDraft[z]), 1.0);
    beta += accept[z];
    residual[z] = std::max(static_cast<double>(kTarget[z]) - kDraft[z], 0.0);
    mass += residual[z];
  }
  for (std::size_t z = 0; z < v; ++z) law[z] = accept[z] + (1.0 - beta) * residual[z] / mass;
  const std::vector<float> p = rows(kTarget, 2), q = rows(kDraft, 1);
  for (const bool block : {false, true}) {
    std::mt19937_64 draft_rng(block ? 7 : 8);
    std::discrete_distribution<std::int32_t> from_q(kDraft.begin(), kDraft.end());
    std::vector<int> counts(v, 0);
    for (int trial = 0; trial < kTrials; ++trial) {
      const std::vector<std::int32_t> drafts = {from_q(draft_rng)};
      VerifyInput in;
      in.vocab_size = 6;
      in.drafts = drafts;
      in.target_probs = p;
      in.draft_probs = q;
      in.entropy = &e;
      const VerifyRandomness random{static_cast<std::uint64_t>(trial), 3};
      ++counts[static_cast<std::size_t>(first_token(block ? verify_block(in, random) : verify_standard(in, random),
                                                    drafts))];
    }
    EXPECT_GT(goodness_of_fit(counts, law), kSignificance) << (block ? "block" : "standard");
    EXPECT_LT(goodness_of_fit(counts, std::vector<double>(kTarget.begin(), kTarget.end())), 1e-9);
  }
}

// A larger alpha lowers every threshold, so acceptance only grows with it, from the lossless rate.
TEST(EntropyVerification, AcceptanceGrowsWithAlpha) {
  const std::vector<std::int32_t> drafts = {1, 2, 3};
  const std::vector<float> p = rows(kTarget, 4);
  double previous = -1.0;
  for (const double alpha : {-1.0, 0.0, 0.4, 1.0}) {  // -1: entropy verification off
    const EntropyVerification e{alpha >= 0.0, 0.95, std::max(alpha, 0.0)};
    long accepted = 0;
    for (int trial = 0; trial < 20000; ++trial) {
      VerifyInput in;
      in.vocab_size = 6;
      in.drafts = drafts;
      in.target_probs = p;
      in.entropy = &e;
      accepted += verify_standard(in, VerifyRandomness{static_cast<std::uint64_t>(trial), 0}).num_accepted;
    }
    const double mean = static_cast<double>(accepted) / 20000.0;
    EXPECT_GT(mean, previous) << "alpha " << alpha;
    previous = mean;
  }
}

}  // namespace
}  // namespace baton
