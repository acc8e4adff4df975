#include "tests/support/chi_square.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace baton::testing {
namespace {

TEST(ChiSquare, PValueMatchesTables) {
  EXPECT_NEAR(chi_square_p_value(3.841, 1), 0.05, 1e-4);
  EXPECT_NEAR(chi_square_p_value(6.635, 1), 0.01, 1e-5);
  EXPECT_NEAR(chi_square_p_value(11.070, 5), 0.05, 1e-5);
  EXPECT_NEAR(chi_square_p_value(16.919, 9), 0.05, 1e-4);
  EXPECT_NEAR(chi_square_p_value(27.877, 9), 0.001, 1e-5);
  EXPECT_NEAR(chi_square_p_value(43.773, 30), 0.05, 1e-5);
  EXPECT_NEAR(chi_square_p_value(59.703, 30), 0.001, 1e-6);
  EXPECT_NEAR(chi_square_p_value(4.865, 10), 0.9, 1e-4);  // the lower tail, by the series
  EXPECT_NEAR(chi_square_p_value(2.0, 2), std::exp(-1.0), 1e-12);
  EXPECT_NEAR(chi_square_p_value(50.0, 2), std::exp(-25.0), 1e-20);
}

}  // namespace
}  // namespace baton::testing

namespace baton {
namespace {

// Reference values of Q(a, x) from PyTorch, float64:
// torch.special.gammaincc(torch.tensor(a, dtype=torch.float64), torch.tensor(x, dtype=torch.float64)).
TEST(RegularizedGammaQ, MatchesTorch) {
  struct Case {
    double a, x, q;
  };
  const Case cases[] = {
      {0.5, 0.1, 0.6547208460185769},    {0.5, 3.0, 0.014305878435429645},   {1.0, 1.0, 0.36787944117144245},
      {2.5, 0.7, 0.924313272801667},     {5.0, 5.0, 0.44049328506521246},    {10.0, 3.0, 0.9988975118698845},
      {10.0, 25.0, 0.0002214766382487829}, {100.0, 90.0, 0.8417790109246789}, {100.0, 130.0, 0.0027504083673065166},
      {0.1, 10.0, 5.547985717901913e-07},
  };
  for (const Case& c : cases) {
    EXPECT_NEAR(regularized_gamma_q(c.a, c.x), c.q, 1e-9 * c.q) << "a " << c.a << " x " << c.x;
  }
  EXPECT_EQ(regularized_gamma_q(3.0, 0.0), 1.0);
}

// Expected statistics and p-values: Pearson's statistic on the merged 2 x bins table computed with
// numpy, the p-value with torch.special.gammaincc(dof / 2, statistic / 2) (float64).
TEST(ChiSquareHomogeneity, NoMergingNeeded) {
  const HomogeneityTest t = chi_square_homogeneity({10, 20, 30}, {30, 20, 10});
  EXPECT_NEAR(t.statistic, 20.0, 1e-12);
  EXPECT_EQ(t.dof, 2);
  EXPECT_EQ(t.bins, 3);
  EXPECT_NEAR(t.p_value, 4.539992976248486e-05, 1e-15);
}

TEST(ChiSquareHomogeneity, RareCategoriesArePooledIntoOneBin) {
  // Totals 4, 4, 3, 1 have expected counts < 5: pooled into (6, 6) -> bins (40, 35), (30, 38), (6, 6).
  const HomogeneityTest t = chi_square_homogeneity({40, 30, 3, 2, 1, 0}, {35, 38, 1, 2, 2, 1});
  EXPECT_EQ(t.bins, 3);
  EXPECT_EQ(t.dof, 2);
  EXPECT_NEAR(t.statistic, 1.2169011508667436, 1e-12);
  EXPECT_NEAR(t.p_value, 0.5441934028120212, 1e-12);
}

TEST(ChiSquareHomogeneity, ATooSmallPoolSwallowsTheSmallestBin) {
  // The pool (3, 2) is still too small, so it takes the smallest bin (20, 30): bins (60, 50), (23, 32).
  const HomogeneityTest t = chi_square_homogeneity({60, 20, 2, 1}, {50, 30, 1, 1});
  EXPECT_EQ(t.bins, 2);
  EXPECT_EQ(t.dof, 1);
  EXPECT_NEAR(t.statistic, 2.3758448427857775, 1e-12);
  EXPECT_NEAR(t.p_value, 0.12322491745577073, 1e-12);
}

TEST(ChiSquareHomogeneity, NothingToCompare) {
  EXPECT_EQ(chi_square_homogeneity({5, 0}, {0, 0}).dof, 0);                 // one sample empty
  EXPECT_EQ(chi_square_homogeneity({100, 0, 0}, {100, 0, 0}).dof, 0);        // one category
  EXPECT_EQ(chi_square_homogeneity({1, 1, 1}, {1, 1, 1}).p_value, 1.0);      // everything pooled, one bin
}

TEST(ChiSquareHomogeneity, CombineAddsStatisticsAndDegreesOfFreedom) {
  const HomogeneityTest a = chi_square_homogeneity({10, 20, 30}, {30, 20, 10});
  const HomogeneityTest b = chi_square_homogeneity({60, 20, 2, 1}, {50, 30, 1, 1});
  const HomogeneityTest c = combine({a, b});
  EXPECT_NEAR(c.statistic, 20.0 + 2.3758448427857775, 1e-12);
  EXPECT_EQ(c.dof, 3);
  EXPECT_NEAR(c.p_value, chi_square_survival(c.statistic, 3), 1e-15);
}

}  // namespace
}  // namespace baton
