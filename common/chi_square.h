// Chi-square statistics, for `baton verify-lossless` and the distribution tests: the upper tail of
// the chi-square distribution (via the regularized upper incomplete gamma function Q(a, x)) and
// the two-sample homogeneity test on category counts, with sparse categories merged until every expected count
// is at least 5 (the usual validity rule of the test).
//
// Pure functions on counts; no I/O. Hand-written rather than a library: Debian's candidates
// (Boost.Math, GSL) would be a large new dependency for one series and one continued fraction,
// and the values are tested against independently computed ones (tests/support/chi_square_test.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace baton {

// Q(a, x) = Gamma(a, x) / Gamma(a), a > 0, x >= 0. Relative error below 1e-9 (a <= 100 tested).
double regularized_gamma_q(double a, double x);

// P(X >= statistic) for X ~ chi-square with `dof` degrees of freedom (1 when dof <= 0).
double chi_square_survival(double statistic, int dof);

struct HomogeneityTest {
  double statistic = 0.0;
  int dof = 0;          // merged bins - 1; 0 when there is nothing to compare
  double p_value = 1.0;
  int bins = 0;         // after merging
  std::int64_t n_a = 0, n_b = 0;
};

inline constexpr double kMinExpectedCount = 5.0;

// Two samples over the same categories: a[j] and b[j] count category j. Categories whose expected
// count (in either sample) is below kMinExpectedCount are pooled into one bin; if that bin is
// still too small it is merged into the smallest remaining bin, and so on. Pearson's statistic on
// the 2 x bins table, dof = bins - 1.
HomogeneityTest chi_square_homogeneity(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);

// Independent tests combined: statistics and dofs add up; the p-value is recomputed.
HomogeneityTest combine(const std::vector<HomogeneityTest>& tests);

}  // namespace baton
