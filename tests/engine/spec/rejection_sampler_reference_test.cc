// Draft verification (token-wise rejection sampling and block verification): every sampled call
// against a plain reference that reads the request's keyed random numbers in the documented order
// (same tokens), one-hot verification against plain sampling's own draws (same tokens), and the
// reference proven lossless by exact enumeration of a small context-dependent model (every draft
// block, every outcome). The reference and the model: verify_reference.h.
#include "engine/spec/rejection_sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/spec/verify_reference.h"

namespace baton {
namespace {

using namespace ::baton::verify_test;

// ---------------------------------------------------------------------------------------------
// Randomness: the real functions against the reference, on the same keyed numbers

TEST(VerifyRandomness, MatchesTheReference) {
  const Model m = make_model();
  TestRng gen(99);
  int accepted_some = 0, rejected_some = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    const std::size_t k = gen.below(5), ctx = gen.below(kContexts);
    const bool one_hot = gen.below(2) == 0;
    std::vector<std::int32_t> drafts;
    std::size_t c2 = ctx;
    for (std::size_t i = 0; i < k; ++i) {
      // Mostly from q, sometimes anything (p(x) = 0 and q(x) = 0 drafts included).
      const std::int32_t x = gen.below(4) == 0 ? static_cast<std::int32_t>(gen.below(kV)) : gen.draw(m.q(c2));
      drafts.push_back(x);
      c2 = next_context(c2, x);
    }
    Case c = make_case(m, ctx, drafts, one_hot);
    c.greedy = gen.below(8) == 0;
    const VerifyRandomness random{gen.gen(), static_cast<std::int64_t>(gen.below(1000))};
    for (const bool block : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " block " << block << " k " << k);
      const VerifyResult got = block ? verify_block(c.input(), random) : verify_standard(c.input(), random);
      const VerifyResult want = block ? reference_block(c, random) : reference_standard(c, random);
      ASSERT_EQ(got.num_accepted, want.num_accepted);
      ASSERT_EQ(got.next_token, want.next_token);
      accepted_some += got.num_accepted > 0;
      rejected_some += static_cast<std::size_t>(got.num_accepted) < k;
    }
  }
  EXPECT_GT(accepted_some, 2500);
  EXPECT_GT(rejected_some, 2500);
}

TEST(VerifyRandomness, OneHotVerificationEmitsWhatPlainSamplingEmits) {
  // Token by token: the accepted drafts and the next token are plain sampling's draws at their
  // positions, so seeded output does not depend on the drafts at all.
  const Model m = make_model();
  TestRng gen(5);
  for (int trial = 0; trial < 5000; ++trial) {
    const std::size_t k = gen.below(6), ctx = gen.below(kContexts);
    std::vector<std::int32_t> drafts;
    for (std::size_t i = 0, c2 = ctx; i < k; ++i) {
      drafts.push_back(gen.draw(m.source(c2, true)));
      c2 = next_context(c2, drafts.back());
    }
    const Case c = make_case(m, ctx, drafts, true);
    const VerifyRandomness random{gen.gen(), static_cast<std::int64_t>(gen.below(1 << 20))};
    for (const Verify& verify : {Verify(verify_standard), Verify(verify_block)}) {
      const VerifyResult r = verify(c.input(), random);
      for (std::int32_t i = 0; i <= r.num_accepted; ++i) {
        RandomStream plain = token_stream(random.seed, random.position + i);
        const std::int32_t want = Sampler::draw(c.p(static_cast<std::size_t>(i)), plain);
        ASSERT_EQ(i < r.num_accepted ? drafts[static_cast<std::size_t>(i)] : r.next_token, want)
            << "trial " << trial << " position " << i;
      }
    }
  }
}

// Rows of any vocabulary size (so every tail of the unrolled sums runs), a third of the entries
// zero; drafts anywhere; probabilistic or one-hot; sometimes q = p on a row.
Case random_case(TestRng& gen) {
  Case c;
  c.vocab = static_cast<std::int32_t>(1 + gen.below(40));
  const std::size_t k = gen.below(6);
  const auto row = [&](std::vector<float>& out) {
    std::vector<double> w(c.v());
    double z = 0.0;
    for (double& x : w) z += (x = gen.below(3) == 0 ? 0.0 : gen.uniform());
    if (z == 0.0) z = w[0] = 1.0;
    for (double x : w) out.push_back(static_cast<float>(x / z));
  };
  for (std::size_t i = 0; i <= k; ++i) row(c.target);
  const bool one_hot = gen.below(3) == 0;
  for (std::size_t i = 0; i < k && !one_hot; ++i) {
    if (gen.below(4) == 0) {
      c.draft.insert(c.draft.end(), c.p(i).begin(), c.p(i).end());
    } else {
      row(c.draft);
    }
  }
  for (std::size_t i = 0; i < k; ++i) c.drafts.push_back(static_cast<std::int32_t>(gen.below(c.v())));
  return c;
}

TEST(VerifyRandomness, MatchesTheReferenceOnRandomRows) {
  TestRng gen(7);
  for (int trial = 0; trial < 10000; ++trial) {
    const Case c = random_case(gen);
    const std::uint64_t seed = gen.gen();
    for (const bool block : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " block " << block << " vocab " << c.vocab);
      const VerifyRandomness random{seed, static_cast<std::int64_t>(trial)};
      const VerifyResult got = block ? verify_block(c.input(), random) : verify_standard(c.input(), random);
      const VerifyResult want = block ? reference_block(c, random) : reference_standard(c, random);
      ASSERT_EQ(got.num_accepted, want.num_accepted);
      ASSERT_EQ(got.next_token, want.next_token);
    }
  }
}

TEST(VerifyRandomness, SameSeedSameResults) {
  const Model m = make_model();
  const std::vector<std::int32_t> drafts = {1, 4, 2};
  for (const bool one_hot : {false, true}) {
    const Case c = make_case(m, 7, drafts, one_hot);
    for (const Verify& verify : {Verify(verify_standard), Verify(verify_block)}) {
      std::vector<std::int32_t> a, b;
      std::set<std::pair<std::int32_t, std::int32_t>> outcomes;
      for (int i = 0; i < 1000; ++i) {
        const VerifyResult x = verify(c.input(), VerifyRandomness{5, i}), y = verify(c.input(), VerifyRandomness{5, i});
        a.insert(a.end(), {x.num_accepted, x.next_token});
        b.insert(b.end(), {y.num_accepted, y.next_token});
        outcomes.insert({x.num_accepted, x.next_token});
      }
      EXPECT_EQ(a, b);
      EXPECT_GT(outcomes.size(), 3u) << "other positions must give other draws";
    }
  }
}

TEST(VerifyRandomness, NoDraftsIsOneSamplerDraw) {
  const Model m = make_model();
  const Case c = make_case(m, 11, {}, true);
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    RandomStream d = token_stream(seed, 40);
    const std::int32_t want = Sampler::draw(c.p(0), d);
    EXPECT_EQ(verify_standard(c.input(), VerifyRandomness{seed, 40}).next_token, want);
    EXPECT_EQ(verify_block(c.input(), VerifyRandomness{seed, 40}).next_token, want);
  }
}

// ---------------------------------------------------------------------------------------------
// Exact enumeration: the reference is lossless, and block verification accepts at least as much

TEST(ExactEnumeration, ReferenceIsLosslessAndBlockAcceptsAtLeastAsMuch) {
  const Model m = make_model();
  for (const std::size_t k : {1u, 2u, 3u}) {
    for (const bool one_hot : {false, true}) {
      std::array<double, 2> mean{};
      for (const bool block : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "k " << k << " one_hot " << one_hot << " block " << block);
        const auto first = exact_first_token(m, k, one_hot, block);
        double worst = 0.0;
        for (std::size_t ctx = 0; ctx < kContexts; ++ctx) {
          for (std::size_t y = 0; y < kV; ++y) worst = std::max(worst, std::fabs(first[ctx][y] - m.p(ctx)[y]));
          const StepExact s = exact_step(m, ctx, k, one_hot, block, &first);
          for (std::size_t y1 = 0; y1 < kV; ++y1) {
            for (std::size_t y2 = 0; y2 < kV; ++y2) {
              const std::size_t then = next_context(ctx, static_cast<std::int32_t>(y1));
              const double want = static_cast<double>(m.p(ctx)[y1]) * m.p(then)[y2];
              worst = std::max(worst, std::fabs(s.first_two[y1 * kV + y2] - want));
            }
          }
          mean[block] += s.mean_accepted / kContexts;
        }
        EXPECT_LT(worst, 1e-6);  // fp32 rows sum to 1 within ~1e-7
      }
      std::printf("[ exact    ] k %zu %s drafts: mean accepted standard %.6f block %.6f\n", k,
                  one_hot ? "one-hot" : "sampled", mean[0], mean[1]);
      if (one_hot) {
        EXPECT_NEAR(mean[1], mean[0], 1e-9);  // no draft prefix can be emitted more often than p allows
      } else if (k > 1) {
        EXPECT_GT(mean[1], mean[0] + 0.01);
      } else {
        EXPECT_NEAR(mean[1], mean[0], 1e-9);  // k = 1: block verification is token-wise
      }
    }
  }
}

TEST(ExactEnumeration, BlockEqualsTokenWiseInLawForOneHotDrafts) {
  const Model m = make_model();
  TestRng gen(3);
  std::vector<double> block_prob, block_scale, standard_prob, standard_scale;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::int32_t> drafts(1 + gen.below(4));
    for (std::int32_t& x : drafts) x = static_cast<std::int32_t>(gen.below(kV));
    const Case c = make_case(m, gen.below(kContexts), drafts, true);
    outcome_probs(c, true, block_prob, block_scale);
    outcome_probs(c, false, standard_prob, standard_scale);
    for (std::size_t t = 0; t <= c.k(); ++t) {
      // Equal when rows sum to 1; fp32 rows do within ~1e-7.
      ASSERT_NEAR(block_prob[t], standard_prob[t], 1e-6) << "trial " << trial << " tau " << t;
      if (t == c.k() || block_prob[t] == 0.0) continue;
      const std::vector<double> a = emitted_at(c, t, block_scale[t]), b = emitted_at(c, t, standard_scale[t]);
      for (std::size_t y = 0; y < kV; ++y) ASSERT_NEAR(a[y], b[y], 1e-6);
    }
  }
}

}  // namespace
}  // namespace baton
