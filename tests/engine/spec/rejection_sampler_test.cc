// Draft verification (token-wise rejection sampling and block verification) checked three ways:
//   1. greedy and degenerate cases by hand;
//   2. every sampled call against a plain reference that reads the request's keyed random numbers
//      in the documented order (same tokens), one-hot verification against plain sampling's own
//      draws (same tokens), and the reference proven lossless by exact enumeration of a small
//      context-dependent model (every draft block, every outcome);
//   3. the real functions' emitted tokens against the target model by chi-square tests over 100k
//      generations, where copies of the sampler with typical bugs (negative controls) must fail.
// Plus block verification's acceptance advantage, measured and computed exactly.
#include "engine/spec/rejection_sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/chi_square.h"

namespace baton {
namespace {

using ::baton::testing::chi_square_p_value;

// ---------------------------------------------------------------------------------------------
// Cases and the reference implementation

struct Case {
  std::int32_t vocab = 0;
  std::vector<std::int32_t> drafts;
  std::vector<float> target;  // [(k + 1) * vocab]
  std::vector<float> draft;   // [k * vocab], empty for one-hot drafts
  bool greedy = false;

  std::size_t k() const { return drafts.size(); }
  std::size_t v() const { return static_cast<std::size_t>(vocab); }
  VerifyInput input() const { return VerifyInput{vocab, drafts, target, draft, greedy}; }
  bool one_hot() const { return draft.empty(); }
  std::span<const float> p(std::size_t row) const { return std::span(target).subspan(row * v(), v()); }
  // M_s(x | row): the draft row, or one-hot at drafts[row].
  double q(std::size_t row, std::size_t x) const {
    if (draft.empty()) return x == static_cast<std::size_t>(drafts[row]) ? 1.0 : 0.0;
    return draft[row * v() + x];
  }
};

using Verify = std::function<VerifyResult(const VerifyInput&, const VerifyRandomness&)>;

// max(scale * p(x) - q(x), 0) over row `row` (p's row, q's row).
std::vector<double> residual(const Case& c, std::size_t row, double scale) {
  std::vector<double> w(c.v());
  for (std::size_t x = 0; x < c.v(); ++x) w[x] = std::max(scale * static_cast<double>(c.p(row)[x]) - c.q(row, x), 0.0);
  return w;
}

double sum(const std::vector<double>& w) {
  double z = 0.0;
  for (double x : w) z += x;
  return z;
}

// The documented residual draw: inverse CDF at u * mass, or Sampler::draw(p) when there is no mass.
std::int32_t draw_residual(const Case& c, std::size_t row, double scale, RandomStream& rng) {
  const std::vector<double> w = residual(c, row, scale);
  const double z = sum(w);
  if (!(z > 0.0)) return Sampler::draw(c.p(row), rng);
  const double target = rng.uniform() * z;
  double cum = 0.0;
  for (std::size_t x = 0; x < w.size(); ++x) {
    cum += w[x];
    if (w[x] > 0.0 && target <= cum) return static_cast<std::int32_t>(x);
  }
  ADD_FAILURE() << "inverse CDF ran off the end";
  return -1;
}

// Token-wise acceptance probability min(1, p(x) / q(x)) at row i (0 when q(x) = 0).
double accept_prob(const Case& c, std::size_t i) {
  const auto x = static_cast<std::size_t>(c.drafts[i]);
  const double qx = c.q(i, x);
  return qx > 0.0 ? std::min(static_cast<double>(c.p(i)[x]) / qx, 1.0) : 0.0;
}

// Block verification's p_i and h_i, 1-based as in the paper (index 0 unused for h).
struct BlockTerms {
  std::vector<double> p, h;
};
BlockTerms block_terms(const Case& c) {
  const std::size_t k = c.k();
  BlockTerms t{std::vector<double>(k + 1), std::vector<double>(k + 1)};
  t.p[0] = 1.0;
  for (std::size_t i = 1; i <= k; ++i) {
    const auto x = static_cast<std::size_t>(c.drafts[i - 1]);
    const double ms = c.q(i - 1, x);
    t.p[i] = ms > 0.0 ? std::min(t.p[i - 1] * c.p(i - 1)[x] / ms, 1.0) : 0.0;
    if (i < k) {
      const double r = sum(residual(c, i, t.p[i]));
      const double den = r + 1.0 - t.p[i];
      t.h[i] = den > 0.0 ? r / den : 1.0;
    } else {
      t.h[i] = t.p[i];
    }
  }
  return t;
}

std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());  // first max
}

VerifyResult reference_greedy(const Case& c) {
  for (std::size_t i = 0; i < c.k(); ++i) {
    if (c.drafts[i] != argmax(c.p(i))) return {static_cast<std::int32_t>(i), argmax(c.p(i))};
  }
  return {static_cast<std::int32_t>(c.k()), argmax(c.p(c.k()))};
}

// One-hot drafts: plain sampling's draw at each position, accepted while it equals the draft.
VerifyResult reference_matching(const Case& c, const VerifyRandomness& random) {
  for (std::size_t i = 0;; ++i) {
    RandomStream rng = token_stream(random.seed, random.position + static_cast<std::int64_t>(i));
    const std::int32_t y = Sampler::draw(c.p(i), rng);
    if (i == c.k() || y != c.drafts[i]) return {static_cast<std::int32_t>(i), y};
  }
}

VerifyResult reference_standard(const Case& c, const VerifyRandomness& random) {
  if (c.greedy) return reference_greedy(c);
  if (c.one_hot()) return reference_matching(c, random);
  RandomStream rng = verify_stream(random);
  for (std::size_t i = 0; i < c.k(); ++i) {
    if (rng.uniform() <= accept_prob(c, i) && c.q(i, static_cast<std::size_t>(c.drafts[i])) > 0.0) continue;
    return {static_cast<std::int32_t>(i), draw_residual(c, i, 1.0, rng)};
  }
  return {static_cast<std::int32_t>(c.k()), Sampler::draw(c.p(c.k()), rng)};
}

VerifyResult reference_block(const Case& c, const VerifyRandomness& random) {
  if (c.greedy) return reference_greedy(c);
  if (c.one_hot()) return reference_matching(c, random);
  RandomStream rng = verify_stream(random);
  const BlockTerms t = block_terms(c);
  std::size_t tau = 0;
  for (std::size_t i = 1; i <= c.k(); ++i) {
    if (rng.uniform() <= t.h[i]) tau = i;
  }
  if (tau == c.k()) return {static_cast<std::int32_t>(tau), Sampler::draw(c.p(tau), rng)};
  return {static_cast<std::int32_t>(tau), draw_residual(c, tau, t.p[tau], rng)};
}

// ---------------------------------------------------------------------------------------------
// Greedy

Case one_hot_rows(std::int32_t vocab, std::vector<std::int32_t> argmaxes, std::vector<std::int32_t> drafts) {
  Case c;
  c.vocab = vocab;
  c.drafts = std::move(drafts);
  c.greedy = true;
  c.target.assign(argmaxes.size() * static_cast<std::size_t>(vocab), 0.0f);
  for (std::size_t i = 0; i < argmaxes.size(); ++i) c.target[i * c.v() + static_cast<std::size_t>(argmaxes[i])] = 1.0f;
  return c;
}

// Both functions, whatever the randomness.
void expect_greedy(const Case& c, std::int32_t accepted, std::int32_t next) {
  for (const Verify& verify : {Verify(verify_standard), Verify(verify_block)}) {
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      const VerifyResult r = verify(c.input(), VerifyRandomness{seed, static_cast<std::int64_t>(seed * 3)});
      EXPECT_EQ(r.num_accepted, accepted);
      EXPECT_EQ(r.next_token, next);
    }
  }
}

TEST(GreedyVerify, StopsAtFirstMismatchWithTheArgmax) {
  expect_greedy(one_hot_rows(5, {2, 4, 1, 0}, {2, 3, 1}), 1, 4);
  expect_greedy(one_hot_rows(5, {2, 4, 1, 0}, {0, 4, 1}), 0, 2);
}

TEST(GreedyVerify, AllMatchEmitsTheBonusArgmax) { expect_greedy(one_hot_rows(5, {2, 4, 1, 0}, {2, 4, 1}), 3, 0); }

TEST(GreedyVerify, NoDraftsEmitsTheArgmax) { expect_greedy(one_hot_rows(5, {3}, {}), 0, 3); }

TEST(GreedyVerify, TiesGoToTheLowestIdAndDraftProbsAreIgnored) {
  Case c;
  c.vocab = 4;
  c.greedy = true;
  c.target = {0.1f, 0.4f, 0.4f, 0.1f,  // tie 1 / 2: argmax 1
              0.3f, 0.2f, 0.2f, 0.3f,  // tie 0 / 3: argmax 0
              0.25f, 0.25f, 0.25f, 0.25f};
  c.drafts = {1, 0};
  c.draft = {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};  // would reject everything if used
  expect_greedy(c, 2, 0);
  c.drafts = {2, 0};
  expect_greedy(c, 0, 1);
  c.drafts = {1, 3};
  expect_greedy(c, 1, 0);
}

// ---------------------------------------------------------------------------------------------
// Degenerate rows: no NaN, the documented fallbacks

// Over many seeds, every outcome of both functions satisfies `check`.
void for_many_seeds(const Case& c, const std::function<void(const VerifyResult&)>& check) {
  for (const Verify& verify : {Verify(verify_standard), Verify(verify_block)}) {
    for (std::uint64_t seed = 0; seed < 2000; ++seed) check(verify(c.input(), VerifyRandomness{seed, 5}));
  }
}

TEST(DegenerateVerify, CertainDraftsAreAlwaysAccepted) {
  Case c;
  c.vocab = 3;
  c.drafts = {1, 2};
  c.target = {0, 1, 0, 0, 0, 1, 0.5f, 0, 0.5f};
  for_many_seeds(c, [](const VerifyResult& r) {  // one-hot drafts
    ASSERT_EQ(r.num_accepted, 2);
    ASSERT_NE(r.next_token, 1);
  });
  c.draft = {0.2f, 0.5f, 0.3f, 0.1f, 0.1f, 0.8f};  // p(x) = 1 >= q(x)
  for_many_seeds(c, [](const VerifyResult& r) { ASSERT_EQ(r.num_accepted, 2); });
}

TEST(DegenerateVerify, ImpossibleDraftsAreRejectedAndCorrectedFromTheTarget) {
  Case c;
  c.vocab = 4;
  c.drafts = {3};
  c.target = {0.5f, 0.0f, 0.5f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f};  // p(3) = 0
  for_many_seeds(c, [](const VerifyResult& r) {  // one-hot: the residual is p itself
    ASSERT_EQ(r.num_accepted, 0);
    ASSERT_TRUE(r.next_token == 0 || r.next_token == 2) << r.next_token;
  });
  c.draft = {0.2f, 0.3f, 0.1f, 0.4f};
  for_many_seeds(c, [](const VerifyResult& r) {
    ASSERT_EQ(r.num_accepted, 0);
    ASSERT_TRUE(r.next_token == 0 || r.next_token == 2) << r.next_token;  // max(p - q, 0) support
  });
}

TEST(DegenerateVerify, ZeroResidualFallsBackToTheTargetRow) {
  // q(x) = 0 at the draft: always rejected, and with q = p the residual max(p - q, 0) is 0.
  Case c;
  c.vocab = 4;
  c.drafts = {3, 0};
  c.target = {0.5f, 0.0f, 0.5f, 0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.25f, 0.25f, 0.25f, 0.25f};
  c.draft = {0.5f, 0.0f, 0.5f, 0.0f, 0.1f, 0.2f, 0.3f, 0.4f};
  std::array<int, 4> seen{};
  for_many_seeds(c, [&](const VerifyResult& r) {
    ASSERT_EQ(r.num_accepted, 0);
    ASSERT_TRUE(r.next_token == 0 || r.next_token == 2) << r.next_token;
    ++seen[static_cast<std::size_t>(r.next_token)];
  });
  EXPECT_GT(seen[0], 1500);
  EXPECT_GT(seen[2], 1500);
  // The second draft is outside q: block verification's p_2 = 0 (h_1 = 1, h_2 = 0); both stop at
  // 1 and correct from max(p - q, 0) = {0.1, 0, 0, 0} (block: scaled by p_1 = 1).
  c.drafts = {0, 0};
  c.draft = {0.5f, 0.0f, 0.5f, 0.0f, 0.0f, 0.2f, 0.3f, 0.5f};
  for_many_seeds(c, [](const VerifyResult& r) {
    ASSERT_EQ(r.num_accepted, 1);
    ASSERT_EQ(r.next_token, 0);
  });
}

TEST(DegenerateVerify, EqualRowsAcceptEverything) {
  Case c;
  c.vocab = 3;
  c.drafts = {0, 2, 1};
  c.target = {0.2f, 0.3f, 0.5f, 0.6f, 0.1f, 0.3f, 0.1f, 0.8f, 0.1f, 0.3f, 0.3f, 0.4f};
  c.draft.assign(c.target.begin(), c.target.begin() + 9);
  for_many_seeds(c, [](const VerifyResult& r) { ASSERT_EQ(r.num_accepted, 3); });
}

// ---------------------------------------------------------------------------------------------
// A small context-dependent model: the target and draft distributions of the next token depend on
// the last two tokens. Rows are generated from a fixed seed; each has one exact zero (at a
// different token for target and draft, so drafts with p(x) = 0 and tokens with q(x) = 0 both
// occur) and otherwise entries of a few percent or more. Sampled drafts come from q; one-hot
// drafts from a greedy-ish proposer (the target's argmax 70% of the time, else a draw from q), so
// that long accepted runs are common. Any draft source independent of the request's stream keeps
// one-hot verification exact.

constexpr std::int32_t kV = 6;
constexpr std::size_t kContexts = kV * kV;

// A test-side generator for drafts and model tables, apart from the request's stream.
struct TestRng {
  std::mt19937_64 gen;
  explicit TestRng(std::uint64_t seed) : gen(seed) {}
  double uniform() { return static_cast<double>((gen() >> 11) + 1) * 0x1.0p-53; }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(gen() % n); }
  // Inverse CDF over a probability row.
  std::int32_t draw(std::span<const float> row) {
    const double u = uniform();
    double cum = 0.0;
    std::size_t last = 0;
    for (std::size_t x = 0; x < row.size(); ++x) {
      if (row[x] <= 0.0f) continue;
      cum += row[x];
      last = x;
      if (u <= cum) break;
    }
    return static_cast<std::int32_t>(last);
  }
};

struct Model {
  std::vector<float> target, draft;  // [kContexts][kV], context = previous * kV + last
  std::vector<float> greedy_source;  // [kContexts][kV] where one-hot drafts come from

  static constexpr std::size_t context(std::int32_t previous, std::int32_t last) {
    return static_cast<std::size_t>(previous * kV + last);
  }
  std::span<const float> p(std::size_t ctx) const { return std::span(target).subspan(ctx * kV, kV); }
  std::span<const float> q(std::size_t ctx) const { return std::span(draft).subspan(ctx * kV, kV); }
  std::span<const float> source(std::size_t ctx, bool one_hot) const {
    return one_hot ? std::span(greedy_source).subspan(ctx * kV, kV) : q(ctx);
  }
};

Model make_model() {
  Model m;
  TestRng rng(2024);
  const auto fill = [&](std::vector<float>& table, bool sharpen, std::size_t zero_shift) {
    table.resize(kContexts * kV);
    for (std::size_t ctx = 0; ctx < kContexts; ++ctx) {
      std::array<double, kV> w{};
      double z = 0.0;
      for (std::size_t x = 0; x < kV; ++x) {
        const double u = rng.uniform();
        w[x] = sharpen ? (0.1 + u) * (0.1 + u) : 0.3 + u;
      }
      w[(ctx / kV + 2 * (ctx % kV) + zero_shift) % kV] = 0.0;
      for (double x : w) z += x;
      for (std::size_t x = 0; x < kV; ++x) table[ctx * kV + x] = static_cast<float>(w[x] / z);
    }
  };
  fill(m.target, false, 0);
  fill(m.draft, true, 1);
  m.greedy_source.resize(kContexts * kV);
  for (std::size_t ctx = 0; ctx < kContexts; ++ctx) {
    const std::size_t best = static_cast<std::size_t>(argmax(m.p(ctx)));
    for (std::size_t x = 0; x < kV; ++x) {
      m.greedy_source[ctx * kV + x] = 0.3f * m.q(ctx)[x] + (x == best ? 0.7f : 0.0f);
    }
  }
  return m;
}

// The verification input for drafts proposed at context `ctx` (rows follow the drafts).
Case make_case(const Model& m, std::size_t ctx, std::span<const std::int32_t> drafts, bool one_hot) {
  Case c;
  c.vocab = kV;
  c.drafts.assign(drafts.begin(), drafts.end());
  for (std::int32_t x : drafts) {
    c.target.insert(c.target.end(), m.p(ctx).begin(), m.p(ctx).end());
    if (!one_hot) c.draft.insert(c.draft.end(), m.q(ctx).begin(), m.q(ctx).end());
    ctx = Model::context(static_cast<std::int32_t>(ctx % kV), x);
  }
  c.target.insert(c.target.end(), m.p(ctx).begin(), m.p(ctx).end());
  return c;
}

std::size_t next_context(std::size_t ctx, std::int32_t token) {
  return Model::context(static_cast<std::int32_t>(ctx % kV), token);
}

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

// One verification step at `ctx` with k drafts drawn from their source, summed over every draft
// block: the distribution of the first two emitted tokens (the second from the next step when only
// one is emitted, with that step's first-token law taken from `first_token`) and the expected
// number accepted.
struct StepExact {
  std::vector<double> first_two = std::vector<double>(kV * kV);
  double mean_accepted = 0.0;
};

// P(tau = t) and the residual scale at t, for t = 0..k.
void outcome_probs(const Case& c, bool block, std::vector<double>& prob, std::vector<double>& scale) {
  const std::size_t k = c.k();
  prob.assign(k + 1, 0.0);
  scale.assign(k + 1, 1.0);
  if (block) {
    const BlockTerms t = block_terms(c);
    for (std::size_t tau = 0; tau <= k; ++tau) {
      double pr = tau == 0 ? 1.0 : t.h[tau];
      for (std::size_t j = tau + 1; j <= k; ++j) pr *= 1.0 - t.h[j];
      prob[tau] = pr;
      scale[tau] = t.p[tau];
    }
    return;
  }
  double reach = 1.0;
  for (std::size_t t = 0; t < k; ++t) {
    prob[t] = reach * (1.0 - accept_prob(c, t));
    reach *= accept_prob(c, t);
  }
  prob[k] = reach;
}

// The emitted token's distribution when verification stops at tau: residual or bonus.
std::vector<double> emitted_at(const Case& c, std::size_t tau, double scale) {
  std::vector<double> w = tau == c.k() ? std::vector<double>(kV) : residual(c, tau, scale);
  double z = sum(w);
  if (!(z > 0.0)) {  // the bonus, or the documented fallback
    for (std::size_t x = 0; x < kV; ++x) w[x] = c.p(tau)[x];
    z = sum(w);
  }
  for (double& x : w) x /= z;
  return w;
}

StepExact exact_step(const Model& m, std::size_t ctx, std::size_t k, bool one_hot, bool block,
                     const std::vector<std::vector<double>>* first_token) {
  StepExact out;
  std::vector<std::int32_t> drafts(k, 0);
  std::vector<double> prob, scale;
  for (std::size_t index = 0;; ++index) {
    // Drafts = the base-kV digits of index, weighted by their probability under the source.
    std::size_t rest = index;
    for (std::size_t i = 0; i < k; ++i, rest /= kV) drafts[i] = static_cast<std::int32_t>(rest % kV);
    if (rest != 0) break;
    double weight = 1.0;
    for (std::size_t i = 0, c2 = ctx; i < k; c2 = next_context(c2, drafts[i]), ++i) {
      weight *= m.source(c2, one_hot)[static_cast<std::size_t>(drafts[i])];
    }
    if (weight == 0.0) continue;
    const Case c = make_case(m, ctx, drafts, one_hot);
    outcome_probs(c, block, prob, scale);
    for (std::size_t tau = 0; tau <= k; ++tau) {
      const double w = weight * prob[tau];
      out.mean_accepted += w * static_cast<double>(tau);
      if (w == 0.0) continue;
      const std::vector<double> e = emitted_at(c, tau, scale[tau]);
      for (std::size_t y1 = 0; y1 < kV; ++y1) {
        for (std::size_t y2 = 0; y2 < kV; ++y2) {
          double pr = 0.0;
          if (tau >= 2) {
            pr = (static_cast<std::int32_t>(y1) == drafts[0]) * (static_cast<std::int32_t>(y2) == drafts[1]);
          } else if (tau == 1) {
            pr = (static_cast<std::int32_t>(y1) == drafts[0]) * e[y2];
          } else if (first_token != nullptr) {
            pr = e[y1] * (*first_token)[next_context(ctx, static_cast<std::int32_t>(y1))][y2];
          }
          out.first_two[y1 * kV + y2] += w * pr;
        }
      }
    }
  }
  return out;
}

// P(first emitted token = y) at every context: first_two with the second token summed out, where
// the next step's first-token table may be any distribution (uniform here).
std::vector<std::vector<double>> exact_first_token(const Model& m, std::size_t k, bool one_hot, bool block) {
  std::vector<std::vector<double>> table(kContexts, std::vector<double>(kV));
  const std::vector<std::vector<double>> filler(kContexts, std::vector<double>(kV, 1.0 / kV));
  for (std::size_t ctx = 0; ctx < kContexts; ++ctx) {
    const StepExact s = exact_step(m, ctx, k, one_hot, block, &filler);
    for (std::size_t y1 = 0; y1 < kV; ++y1) {
      for (std::size_t y2 = 0; y2 < kV; ++y2) table[ctx][y1] += s.first_two[y1 * kV + y2];
    }
  }
  return table;
}

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
