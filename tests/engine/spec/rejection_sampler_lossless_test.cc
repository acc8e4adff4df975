// Draft verification (token-wise rejection sampling and block verification): the real functions'
// emitted tokens against the target model by chi-square tests over 100k generations, where copies
// of the sampler with typical bugs (negative controls) must fail. Plus block verification's
// acceptance advantage, measured and computed exactly. The reference and the model:
// verify_reference.h.
#include "engine/spec/rejection_sampler.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/spec/verify_reference.h"
#include "tests/support/chi_square.h"

namespace baton {
namespace {

using ::baton::testing::chi_square_p_value;
using namespace ::baton::verify_test;

// ---------------------------------------------------------------------------------------------
// Chi-square goodness of fit


// Observed counts against expected probabilities; a count in a cell of probability 0 fails
// outright (p-value 0).
double goodness_of_fit(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double chi2 = 0.0;
  int df = -1;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      if (counts[i] != 0) return 0.0;
      continue;
    }
    const double expected = n * p[i];
    EXPECT_GE(expected, 5.0) << "chi-square needs >= 5 expected per cell";
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++df;
  }
  return chi_square_p_value(chi2, df);
}

// ---------------------------------------------------------------------------------------------
// Monte Carlo: generations of two tokens from a fixed start, step by step (drafts from q with a
// test generator, verification with the request's keyed numbers), each trial a request of its own.

constexpr std::size_t kStart = Model::context(2, 5);
constexpr int kTrials = 100000;
constexpr double kSignificance = 1e-4;

struct Fit {
  double first = 0.0, first_two = 0.0;  // chi-square p-values
  bool passes() const { return first > kSignificance && first_two > kSignificance; }
};

// k < 0: each step proposes 0..3 drafts (uniformly), as a proposer with a variable length would.
Fit generate(const Model& m, const Verify& verify, bool one_hot, int k, std::uint64_t seed) {
  TestRng gen(seed * 7919 + 1);
  std::vector<int> first(kV), first_two(kV * kV);
  std::vector<std::int32_t> drafts;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::size_t ctx = kStart;
    std::array<std::int32_t, 2> y{};
    std::size_t emitted = 0;
    const auto emit = [&](std::int32_t token) {
      if (emitted < 2) y[emitted++] = token;
      ctx = next_context(ctx, token);
    };
    while (emitted < 2) {
      const std::size_t n = k >= 0 ? static_cast<std::size_t>(k) : gen.below(4);
      drafts.clear();
      for (std::size_t i = 0, c2 = ctx; i < n; ++i) {
        drafts.push_back(gen.draw(m.source(c2, one_hot)));
        c2 = next_context(c2, drafts.back());
      }
      const Case c = make_case(m, ctx, drafts, one_hot);
      const VerifyResult r = verify(c.input(), VerifyRandomness{seed * 1000003 + static_cast<std::uint64_t>(trial),
                                                                static_cast<std::int64_t>(emitted)});
      for (std::int32_t j = 0; j < r.num_accepted; ++j) emit(drafts[static_cast<std::size_t>(j)]);
      emit(r.next_token);
    }
    ++first[static_cast<std::size_t>(y[0])];
    ++first_two[static_cast<std::size_t>(y[0] * kV + y[1])];
  }
  std::vector<double> want_first(kV), want_two(kV * kV);
  for (std::size_t y1 = 0; y1 < kV; ++y1) {
    want_first[y1] = m.p(kStart)[y1];
    for (std::size_t y2 = 0; y2 < kV; ++y2) {
      want_two[y1 * kV + y2] = want_first[y1] * m.p(next_context(kStart, static_cast<std::int32_t>(y1)))[y2];
    }
  }
  return Fit{goodness_of_fit(first, want_first, kTrials), goodness_of_fit(first_two, want_two, kTrials)};
}

TEST(Lossless, EmittedTokensFollowTheTarget) {
  const Model m = make_model();
  std::uint64_t seed = 1;
  for (const bool block : {false, true}) {
    for (const bool one_hot : {false, true}) {
      for (const int k : {3, 2, -1}) {
        const Fit f = generate(m, block ? Verify(verify_block) : Verify(verify_standard), one_hot, k, seed++);
        std::printf("[ chi2     ] %-8s %-7s k %-8s p first %.4f  p first two %.4f\n", block ? "block" : "standard",
                    one_hot ? "one-hot" : "sampled", k < 0 ? "0..3" : std::to_string(k).c_str(), f.first,
                    f.first_two);
        EXPECT_TRUE(f.passes()) << "block " << block << " one_hot " << one_hot << " k " << k << ": p " << f.first
                                << ", " << f.first_two;
      }
    }
  }
}

// Negative controls: copies of the reference with one typical bug each.

// (a) The correction drawn from p instead of max(p - q, 0).
VerifyResult residual_from_p(const VerifyInput& in, const VerifyRandomness& random) {
  RandomStream rng = verify_stream(random);
  const Case c{in.vocab_size, {in.drafts.begin(), in.drafts.end()}, {in.target_probs.begin(), in.target_probs.end()},
               {in.draft_probs.begin(), in.draft_probs.end()}, false};
  for (std::size_t i = 0; i < c.k(); ++i) {
    if (rng.uniform() <= accept_prob(c, i)) continue;
    return {static_cast<std::int32_t>(i), Sampler::draw(c.p(i), rng)};
  }
  return {static_cast<std::int32_t>(c.k()), Sampler::draw(c.p(c.k()), rng)};
}

// (b) A lenient accept test: a ratio p(x) / q(x) of at least 0.5 always accepts.
VerifyResult lenient_accept(const VerifyInput& in, const VerifyRandomness& random) {
  RandomStream rng = verify_stream(random);
  const Case c{in.vocab_size, {in.drafts.begin(), in.drafts.end()}, {in.target_probs.begin(), in.target_probs.end()},
               {in.draft_probs.begin(), in.draft_probs.end()}, false};
  for (std::size_t i = 0; i < c.k(); ++i) {
    if (rng.uniform() <= accept_prob(c, i) || accept_prob(c, i) >= 0.5) continue;
    return {static_cast<std::int32_t>(i), draw_residual(c, i, 1.0, rng)};
  }
  return {static_cast<std::int32_t>(c.k()), Sampler::draw(c.p(c.k()), rng)};
}

// (c) The one-hot accept test (u <= p(x)) applied to sampled drafts, ignoring q(x).
VerifyResult accept_ignoring_q(const VerifyInput& in, const VerifyRandomness& random) {
  RandomStream rng = verify_stream(random);
  const Case c{in.vocab_size, {in.drafts.begin(), in.drafts.end()}, {in.target_probs.begin(), in.target_probs.end()},
               {in.draft_probs.begin(), in.draft_probs.end()}, false};
  for (std::size_t i = 0; i < c.k(); ++i) {
    if (rng.uniform() <= c.p(i)[static_cast<std::size_t>(c.drafts[i])]) continue;
    return {static_cast<std::int32_t>(i), draw_residual(c, i, 1.0, rng)};
  }
  return {static_cast<std::int32_t>(c.k()), Sampler::draw(c.p(c.k()), rng)};
}

// (d) Block verification with the residual max(M_b - M_s, 0), forgetting the p_tau scale.
VerifyResult unscaled_block_residual(const VerifyInput& in, const VerifyRandomness& random) {
  RandomStream rng = verify_stream(random);
  const Case c{in.vocab_size, {in.drafts.begin(), in.drafts.end()}, {in.target_probs.begin(), in.target_probs.end()},
               {in.draft_probs.begin(), in.draft_probs.end()}, false};
  const BlockTerms t = block_terms(c);
  std::size_t tau = 0;
  for (std::size_t i = 1; i <= c.k(); ++i) {
    if (rng.uniform() <= t.h[i]) tau = i;
  }
  if (tau == c.k()) return {static_cast<std::int32_t>(tau), Sampler::draw(c.p(tau), rng)};
  return {static_cast<std::int32_t>(tau), draw_residual(c, tau, 1.0, rng)};
}

TEST(Lossless, NegativeControlsFailTheSameTest) {
  const Model m = make_model();
  struct Control {
    const char* name;
    Verify verify;
    bool one_hot;
  };
  const std::array<Control, 5> controls = {{{"residual from p", residual_from_p, false},
                                            {"residual from p", residual_from_p, true},
                                            {"lenient accept", lenient_accept, false},
                                            {"accept ignoring q", accept_ignoring_q, false},
                                            {"unscaled block residual", unscaled_block_residual, false}}};
  std::uint64_t seed = 101;
  for (const Control& control : controls) {
    const Fit f = generate(m, control.verify, control.one_hot, 3, seed++);
    std::printf("[ control  ] %-24s %-7s k 3 p first %.3g  p first two %.3g\n", control.name,
                control.one_hot ? "one-hot" : "sampled", f.first, f.first_two);
    EXPECT_FALSE(f.passes()) << control.name << ": p " << f.first << ", " << f.first_two;
  }
}

// ---------------------------------------------------------------------------------------------
// Block vs token-wise: mean accepted drafts on the same drafts and seeds, against the exact means

TEST(BlockVerify, AcceptsAtLeastAsManyAsTokenWise) {
  const Model m = make_model();
  constexpr std::size_t kK = 3;
  constexpr int kSteps = 100000;
  for (const bool one_hot : {false, true}) {
    std::array<double, 2> exact{};
    for (const bool block : {false, true}) {
      for (std::size_t ctx = 0; ctx < kContexts; ++ctx) {
        exact[block] += exact_step(m, ctx, kK, one_hot, block, nullptr).mean_accepted / kContexts;
      }
    }
    TestRng gen(4242);
    std::array<double, 2> total{}, squares{};
    double diff = 0.0, diff_squares = 0.0;
    std::vector<std::int32_t> drafts(kK);
    for (int step = 0; step < kSteps; ++step) {
      const std::size_t ctx = gen.below(kContexts);
      for (std::size_t i = 0, c2 = ctx; i < kK; ++i) {
        drafts[i] = gen.draw(m.source(c2, one_hot));
        c2 = next_context(c2, drafts[i]);
      }
      const Case c = make_case(m, ctx, drafts, one_hot);
      const double s = verify_standard(c.input(), VerifyRandomness{42, step}).num_accepted;
      const double b = verify_block(c.input(), VerifyRandomness{42, step}).num_accepted;
      total[0] += s;
      total[1] += b;
      squares[0] += s * s;
      squares[1] += b * b;
      diff += b - s;
      diff_squares += (b - s) * (b - s);
    }
    const auto stderr_of = [](double t, double sq) {
      const double mean = t / kSteps;
      return std::sqrt((sq / kSteps - mean * mean) / kSteps);
    };
    std::array<double, 2> mean{total[0] / kSteps, total[1] / kSteps};
    std::printf("[ accepted ] k 3 %s drafts over %d steps: standard %.4f (exact %.4f)  block %.4f (exact %.4f)\n",
                one_hot ? "one-hot" : "sampled", kSteps, mean[0], exact[0], mean[1], exact[1]);
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(mean[i], exact[i], 5.0 * stderr_of(total[i], squares[i])) << i;
    if (one_hot) {
      EXPECT_NEAR(mean[1], mean[0], 5.0 * stderr_of(diff, diff_squares));
    } else {
      EXPECT_GT(mean[1], mean[0]);
      EXPECT_GT(exact[1], exact[0]);
    }
  }
}

}  // namespace
}  // namespace baton
