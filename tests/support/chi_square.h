// Statistics helpers shared by the distribution tests (sampler, rejection sampler).
#pragma once

#include <cmath>

namespace baton::testing {

// Upper tail of the chi-square distribution, Q(df / 2, x / 2) (regularized incomplete gamma by
// its series below a + 1 and its continued fraction above).
inline double chi_square_p_value(double x, int df) {
  const double a = df / 2.0, z = x / 2.0;
  if (z <= 0.0) return 1.0;
  const double front = std::exp(-z + a * std::log(z) - std::lgamma(a));
  if (z < a + 1.0) {
    double term = 1.0 / a, total = term, ap = a;
    for (int n = 0; n < 10000 && std::fabs(term) > std::fabs(total) * 1e-16; ++n) {
      ap += 1.0;
      term *= z / ap;
      total += term;
    }
    return 1.0 - total * front;
  }
  const double tiny = 1e-300;
  double b = z + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return front * h;
}


}  // namespace baton::testing
