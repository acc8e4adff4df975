#include "common/chi_square.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/status.h"

namespace baton {
namespace {

constexpr double kEpsilon = 1e-15;
constexpr int kMaxIterations = 10000;

// P(a, x) by its power series; converges fast for x < a + 1.
double gamma_p_series(double a, double x) {
  double term = 1.0 / a, sum = term;
  for (int n = 1; n < kMaxIterations; ++n) {
    term *= x / (a + n);
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * kEpsilon) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

// Q(a, x) by its continued fraction (modified Lentz); converges fast for x >= a + 1.
double gamma_q_continued_fraction(double a, double x) {
  constexpr double tiny = std::numeric_limits<double>::min() / kEpsilon;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < kMaxIterations; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < kEpsilon) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

}  // namespace

double regularized_gamma_q(double a, double x) {
  BATON_CHECK(a > 0 && x >= 0, "regularized_gamma_q needs a > 0 and x >= 0, got a = ", a, ", x = ", x);
  if (x == 0) return 1.0;
  if (x < a + 1.0) return 1.0 - gamma_p_series(a, x);
  return gamma_q_continued_fraction(a, x);
}

double chi_square_survival(double statistic, int dof) {
  if (dof <= 0 || !(statistic > 0)) return 1.0;
  return regularized_gamma_q(0.5 * dof, 0.5 * statistic);
}

HomogeneityTest chi_square_homogeneity(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  BATON_CHECK(a.size() == b.size(), "chi_square_homogeneity: ", a.size(), " vs ", b.size(), " categories");
  HomogeneityTest t;
  t.n_a = std::accumulate(a.begin(), a.end(), std::int64_t{0});
  t.n_b = std::accumulate(b.begin(), b.end(), std::int64_t{0});
  const double n = static_cast<double>(t.n_a + t.n_b);
  if (t.n_a == 0 || t.n_b == 0) return t;
  // The smaller sample's share of a bin's total is its smaller expected count.
  const double min_share = static_cast<double>(std::min(t.n_a, t.n_b)) / n;
  const auto big_enough = [&](std::int64_t total) { return static_cast<double>(total) * min_share >= kMinExpectedCount; };

  struct Bin {
    std::int64_t a = 0, b = 0;
    std::int64_t total() const { return a + b; }
  };
  std::vector<Bin> bins;
  Bin pool;
  for (std::size_t j = 0; j < a.size(); ++j) {
    if (a[j] + b[j] == 0) continue;
    if (big_enough(a[j] + b[j])) {
      bins.push_back({a[j], b[j]});
    } else {
      pool.a += a[j];
      pool.b += b[j];
    }
  }
  // The pooled rare categories become one bin; while too small, it swallows the smallest bin.
  if (pool.total() > 0) {
    std::sort(bins.begin(), bins.end(), [](const Bin& x, const Bin& y) { return x.total() > y.total(); });
    while (!big_enough(pool.total()) && !bins.empty()) {
      pool.a += bins.back().a;
      pool.b += bins.back().b;
      bins.pop_back();
    }
    bins.push_back(pool);
  }
  t.bins = static_cast<int>(bins.size());
  if (t.bins < 2) return t;
  for (const Bin& bin : bins) {
    const double total = static_cast<double>(bin.total());
    const double ea = total * static_cast<double>(t.n_a) / n, eb = total * static_cast<double>(t.n_b) / n;
    t.statistic += (static_cast<double>(bin.a) - ea) * (static_cast<double>(bin.a) - ea) / ea +
                   (static_cast<double>(bin.b) - eb) * (static_cast<double>(bin.b) - eb) / eb;
  }
  t.dof = t.bins - 1;
  t.p_value = chi_square_survival(t.statistic, t.dof);
  return t;
}

HomogeneityTest combine(const std::vector<HomogeneityTest>& tests) {
  HomogeneityTest t;
  for (const HomogeneityTest& x : tests) {
    t.statistic += x.statistic;
    t.dof += x.dof;
    t.bins += x.bins;
    t.n_a += x.n_a;
    t.n_b += x.n_b;
  }
  t.p_value = chi_square_survival(t.statistic, t.dof);
  return t;
}

}  // namespace baton
