#include "tests/support/chi_square.h"

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
