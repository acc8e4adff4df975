#include "engine/spec/rejection_sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>

#include "common/status.h"

// Why a zero residual cannot arise in exact arithmetic when the drafts are drawn from q:
//
// Token-wise: a rejection at x needs u > p(x) / q(x), i.e. p(x) < q(x). If max(p - q, 0) summed to
// 0, p <= q everywhere, and since both sum to 1, p = q, so no rejection could have happened.
// (One-hot drafts never reach the residual code: they take the matching rule.)
//
// Block: a chosen tau < k with R_tau = 0 needs h_tau > 0, so either tau = 0 (p_0 = 1) or p_tau = 1
// (otherwise h_tau = 0 / (1 - p_tau) = 0). So p_tau = 1 and p_tau M_b <= M_s everywhere, hence
// M_b(.|x_<=tau) = M_s(.|x_<=tau), hence p_{tau+1} = min(M_b(x) / M_s(x), 1) = 1 for the draft
// x = x_{tau+1} in M_s's support, hence h_{tau+1} = 1 (R / R, or 1 by convention, or p_k = 1 when
// tau + 1 = k) and eta_{tau+1} <= 1 makes tau + 1 chosen too: a contradiction with tau maximal.
//
// So the fallback only runs on rounding (rows equal up to fp32 error, where p and the residual's
// normalization disagree by a few ulps) or on drafts outside q's support (already not drawn from
// q). Drawing from the target row p is then the draw the case reduces to as the rows converge.

namespace baton {
namespace {

std::size_t vocab_of(const VerifyInput& in) { return static_cast<std::size_t>(in.vocab_size); }

// Checks the shapes; these come from the engine, so a mismatch is our bug.
void check_input(const VerifyInput& in) {
  BATON_CHECK(in.vocab_size > 0, "vocab_size is ", in.vocab_size);
  const std::size_t vocab = vocab_of(in), k = in.drafts.size();
  BATON_CHECK(in.target_probs.size() == (k + 1) * vocab, "target_probs has ", in.target_probs.size(),
              " entries for ", k, " drafts over a vocabulary of ", vocab, " (want (k + 1) * vocab)");
  BATON_CHECK(in.draft_probs.empty() || in.draft_probs.size() == k * vocab, "draft_probs has ",
              in.draft_probs.size(), " entries for ", k, " drafts over a vocabulary of ", vocab,
              " (want k * vocab, or none for one-hot drafts)");
  for (std::size_t i = 0; i < k; ++i) {
    BATON_CHECK(in.drafts[i] >= 0 && in.drafts[i] < in.vocab_size, "draft ", i, " is token ", in.drafts[i],
                ", outside the vocabulary [0, ", vocab, ")");
  }
}

std::span<const float> target_row(const VerifyInput& in, std::size_t i) {
  return in.target_probs.subspan(i * vocab_of(in), vocab_of(in));
}

// Row i of q (probabilistic drafts only).
std::span<const float> draft_row(const VerifyInput& in, std::size_t i) {
  return in.draft_probs.subspan(i * vocab_of(in), vocab_of(in));
}

std::size_t draft_at(const VerifyInput& in, std::size_t i) { return static_cast<std::size_t>(in.drafts[i]); }

// q(x) for the draft x at position i.
double draft_prob(const VerifyInput& in, std::size_t i) { return draft_row(in, i)[draft_at(in, i)]; }

// Lowest id on ties.
std::int32_t argmax(std::span<const float> row) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < row.size(); ++i) {
    if (row[i] > row[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

// r(x) = max(scale * p(x) - q(x), 0) at one position, q a draft row. scale is 1 for token-wise
// verification and p_tau for block verification.
struct Residual {
  std::span<const float> p;
  std::span<const float> q;
  double scale = 1.0;
};

// max(d, 0) without a branch: whether p(x) > q(x) is a coin flip per token (after top-k/top-p so
// is p(x) > 0), and a mispredicted branch per token costs several times the arithmetic. GCC turns
// both std::max and d * (d > 0) into compare-and-jump, so the sign bit clears the value instead.
double positive_part(double d) {
  const auto bits = std::bit_cast<std::int64_t>(d);
  return std::bit_cast<double>(bits & ~(bits >> 63));  // arithmetic shift: all ones when d < 0
}

// Calls f(term) where term(x) = r(x), so that the loops in f are free of branches per token.
template <class F>
auto with_residual_terms(const Residual& r, F f) {
  const float* p = r.p.data();
  const double scale = r.scale;
  const float* q = r.q.data();
  return f([=](std::size_t x) {
    return positive_part(scale * static_cast<double>(p[x]) - static_cast<double>(q[x]));
  });
}

// Sum of r in double, with four independent partial sums so that the adds do not wait on each
// other (a vocabulary of 150k is otherwise 150k dependent adds per position).
double residual_mass(const Residual& r) {
  const std::size_t n = r.p.size();
  return with_residual_terms(r, [n](auto term) {
    double z0 = 0.0, z1 = 0.0, z2 = 0.0, z3 = 0.0;
    std::size_t x = 0;
    for (; x + 4 <= n; x += 4) {
      z0 += term(x);
      z1 += term(x + 1);
      z2 += term(x + 2);
      z3 += term(x + 3);
    }
    for (; x < n; ++x) z0 += term(x);
    return (z0 + z1) + (z2 + z3);
  });
}

// One uniform: an inverse-CDF draw from normalize(r), or from p when r has no mass (see the top of
// this file for why that is the exact answer up to rounding).
std::int32_t draw_residual(const Residual& r, RandomStream& rng) {
  const double z = residual_mass(r);
  if (!(z > 0.0)) return Sampler::draw(r.p, rng);
  const double target = rng.uniform() * z;
  const std::size_t n = r.p.size();
  return with_residual_terms(r, [n, target](auto term) {
    // cum first reaches target (> 0) at a token whose residual raised it; the test on rx only
    // matters if target underflowed to 0, and sits behind the one predictable branch.
    double cum = 0.0;
    for (std::size_t x = 0; x < n; ++x) {
      const double rx = term(x);
      cum += rx;
      if (target <= cum) [[unlikely]] {
        if (rx > 0.0) return static_cast<std::int32_t>(x);
      }
    }
    // The running sum may end an ulp short of z (other order of additions); the last token with
    // positive residual takes that sliver, as in Sampler::draw. One exists since z > 0.
    std::size_t x = n - 1;
    while (x > 0 && !(term(x) > 0.0)) --x;
    return static_cast<std::int32_t>(x);
  });
}

VerifyResult verify_greedy(const VerifyInput& in) {
  const std::size_t k = in.drafts.size();
  for (std::size_t i = 0; i < k; ++i) {
    const std::int32_t best = argmax(target_row(in, i));
    if (in.drafts[i] != best) return VerifyResult{static_cast<std::int32_t>(i), best};
  }
  return VerifyResult{static_cast<std::int32_t>(k), argmax(target_row(in, k))};
}

bool entropy_on(const VerifyInput& in) { return in.entropy != nullptr && in.entropy->enabled; }

// The factor on position i's uniform: 1, or the entropy threshold of the row scoring drafts[i].
double uniform_scale(const VerifyInput& in, std::size_t i) {
  return entropy_on(in) ? entropy_threshold(target_row(in, i), *in.entropy) : 1.0;
}

// One-hot drafts, sampled: each position's token is plain sampling's draw there (and, with entropy
// verification, a mismatching draft may still be accepted: verify_standard's comment).
VerifyResult verify_matching(const VerifyInput& in, const VerifyRandomness& random) {
  const std::size_t k = in.drafts.size();
  RandomStream extra = verify_stream(random);
  for (std::size_t i = 0;; ++i) {
    RandomStream rng = token_stream(random.seed, random.position + static_cast<std::int64_t>(i));
    const std::int32_t y = Sampler::draw(target_row(in, i), rng);
    if (i == k) return VerifyResult{static_cast<std::int32_t>(i), y};
    if (y == in.drafts[i]) continue;
    if (entropy_on(in)) {
      const double px = target_row(in, i)[draft_at(in, i)];
      const double accept = std::min(px / uniform_scale(in, i), 1.0);
      if (extra.uniform() * (1.0 - px) <= accept - px) continue;
    }
    return VerifyResult{static_cast<std::int32_t>(i), y};
  }
}

}  // namespace

double entropy_threshold(std::span<const float> target_row, const EntropyVerification& entropy) {
  double h = 0.0;
  for (const float p : target_row) {
    const double pd = p;
    if (pd > 0.0) h -= pd * std::log(pd + 1e-10);
  }
  return std::min(std::exp(-entropy.posterior_alpha * h), entropy.posterior_threshold);
}

VerifyResult verify_standard(const VerifyInput& in, const VerifyRandomness& random) {
  check_input(in);
  if (in.greedy) return verify_greedy(in);
  if (in.draft_probs.empty()) return verify_matching(in, random);
  RandomStream rng = verify_stream(random);
  const std::size_t k = in.drafts.size();
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t x = draft_at(in, i);
    const double px = target_row(in, i)[x];
    const double qx = draft_prob(in, i);
    const double u = rng.uniform() * uniform_scale(in, i);
    if (qx > 0.0 && u <= px / qx) continue;
    const Residual r{target_row(in, i), draft_row(in, i), 1.0};
    return VerifyResult{static_cast<std::int32_t>(i), draw_residual(r, rng)};
  }
  return VerifyResult{static_cast<std::int32_t>(k), Sampler::draw(target_row(in, k), rng)};
}

VerifyResult verify_block(const VerifyInput& in, const VerifyRandomness& random) {
  check_input(in);
  if (in.greedy) return verify_greedy(in);
  if (in.draft_probs.empty()) return verify_matching(in, random);
  RandomStream rng = verify_stream(random);
  const std::size_t k = in.drafts.size();
  // Paper position i (1-based) uses drafts[i - 1] scored by rows i - 1, and R_i over rows i.
  std::size_t tau = 0;
  double p_tau = 1.0;
  double p_i = 1.0;
  for (std::size_t i = 1; i <= k; ++i) {
    const std::size_t x = draft_at(in, i - 1);
    const double qx = draft_prob(in, i - 1);
    // A draft outside q's support is never accepted (as in verify_standard); once p_i is 0 it stays 0.
    p_i = qx > 0.0 ? std::min(p_i * static_cast<double>(target_row(in, i - 1)[x]) / qx, 1.0) : 0.0;
    double h = p_i;  // h_k
    if (i < k) {
      // p_i = 0 gives R_i = 0 and h_i = 0 / 1 = 0 without the sum.
      const Residual next{target_row(in, i), draft_row(in, i), p_i};
      const double r = p_i > 0.0 ? residual_mass(next) : 0.0;
      const double denominator = r + (1.0 - p_i);
      h = denominator > 0.0 ? r / denominator : 1.0;
    }
    const double eta = rng.uniform() * uniform_scale(in, i - 1);
    if (eta <= h) {
      tau = i;
      p_tau = p_i;
    }
  }
  if (tau == k) return VerifyResult{static_cast<std::int32_t>(k), Sampler::draw(target_row(in, k), rng)};
  const Residual r{target_row(in, tau), draft_row(in, tau), p_tau};
  return VerifyResult{static_cast<std::int32_t>(tau), draw_residual(r, rng)};
}

}  // namespace baton
