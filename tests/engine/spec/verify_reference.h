// Test-only code shared by the draft verification tests (rejection_sampler_*_test.cc): the cases,
// the documented reference that the real verify_standard and verify_block are compared with (plain
// token-wise and block verification reading the request's keyed random numbers in the documented
// order), a small context-dependent model, and the exact enumeration of one verification step over
// every draft block.
//
// It must stay an independent reference written from the documented rules (rejection_sampler.h):
// it must not call the functions under test or share code with rejection_sampler.cc, or comparing
// against it proves nothing. Not for use outside the tests.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "engine/spec/rejection_sampler.h"
#include "gtest/gtest.h"

namespace baton::verify_test {

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
inline std::vector<double> residual(const Case& c, std::size_t row, double scale) {
  std::vector<double> w(c.v());
  for (std::size_t x = 0; x < c.v(); ++x) w[x] = std::max(scale * static_cast<double>(c.p(row)[x]) - c.q(row, x), 0.0);
  return w;
}

inline double sum(const std::vector<double>& w) {
  double z = 0.0;
  for (double x : w) z += x;
  return z;
}

// The documented residual draw: inverse CDF at u * mass, or Sampler::draw(p) when there is no mass.
inline std::int32_t draw_residual(const Case& c, std::size_t row, double scale, RandomStream& rng) {
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
inline double accept_prob(const Case& c, std::size_t i) {
  const auto x = static_cast<std::size_t>(c.drafts[i]);
  const double qx = c.q(i, x);
  return qx > 0.0 ? std::min(static_cast<double>(c.p(i)[x]) / qx, 1.0) : 0.0;
}

// Block verification's p_i and h_i, 1-based as in the paper (index 0 unused for h).
struct BlockTerms {
  std::vector<double> p, h;
};
inline BlockTerms block_terms(const Case& c) {
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

inline std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());  // first max
}

inline VerifyResult reference_greedy(const Case& c) {
  for (std::size_t i = 0; i < c.k(); ++i) {
    if (c.drafts[i] != argmax(c.p(i))) return {static_cast<std::int32_t>(i), argmax(c.p(i))};
  }
  return {static_cast<std::int32_t>(c.k()), argmax(c.p(c.k()))};
}

// One-hot drafts: plain sampling's draw at each position, accepted while it equals the draft.
inline VerifyResult reference_matching(const Case& c, const VerifyRandomness& random) {
  for (std::size_t i = 0;; ++i) {
    RandomStream rng = token_stream(random.seed, random.position + static_cast<std::int64_t>(i));
    const std::int32_t y = Sampler::draw(c.p(i), rng);
    if (i == c.k() || y != c.drafts[i]) return {static_cast<std::int32_t>(i), y};
  }
}

inline VerifyResult reference_standard(const Case& c, const VerifyRandomness& random) {
  if (c.greedy) return reference_greedy(c);
  if (c.one_hot()) return reference_matching(c, random);
  RandomStream rng = verify_stream(random);
  for (std::size_t i = 0; i < c.k(); ++i) {
    if (rng.uniform() <= accept_prob(c, i) && c.q(i, static_cast<std::size_t>(c.drafts[i])) > 0.0) continue;
    return {static_cast<std::int32_t>(i), draw_residual(c, i, 1.0, rng)};
  }
  return {static_cast<std::int32_t>(c.k()), Sampler::draw(c.p(c.k()), rng)};
}

inline VerifyResult reference_block(const Case& c, const VerifyRandomness& random) {
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
// A small context-dependent model: the target and draft distributions of the next token depend on
// the last two tokens. Rows are generated from a fixed seed; each has one exact zero (at a
// different token for target and draft, so drafts with p(x) = 0 and tokens with q(x) = 0 both
// occur) and otherwise entries of a few percent or more. Sampled drafts come from q; one-hot
// drafts from a greedy-ish proposer (the target's argmax 70% of the time, else a draw from q), so
// that long accepted runs are common. Any draft source independent of the request's stream keeps
// one-hot verification exact.

inline constexpr std::int32_t kV = 6;
inline constexpr std::size_t kContexts = kV * kV;

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

inline Model make_model() {
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
inline Case make_case(const Model& m, std::size_t ctx, std::span<const std::int32_t> drafts, bool one_hot) {
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

inline std::size_t next_context(std::size_t ctx, std::int32_t token) {
  return Model::context(static_cast<std::int32_t>(ctx % kV), token);
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
inline void outcome_probs(const Case& c, bool block, std::vector<double>& prob, std::vector<double>& scale) {
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
inline std::vector<double> emitted_at(const Case& c, std::size_t tau, double scale) {
  std::vector<double> w = tau == c.k() ? std::vector<double>(kV) : residual(c, tau, scale);
  double z = sum(w);
  if (!(z > 0.0)) {  // the bonus, or the documented fallback
    for (std::size_t x = 0; x < kV; ++x) w[x] = c.p(tau)[x];
    z = sum(w);
  }
  for (double& x : w) x /= z;
  return w;
}

inline StepExact exact_step(const Model& m, std::size_t ctx, std::size_t k, bool one_hot, bool block,
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
inline std::vector<std::vector<double>> exact_first_token(const Model& m, std::size_t k, bool one_hot, bool block) {
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

}  // namespace baton::verify_test
