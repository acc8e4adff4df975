// Statistics helpers shared by the distribution tests (sampler, rejection sampler).
#pragma once

#include <cmath>

#include "common/chi_square.h"

namespace baton::testing {

// Upper tail of the chi-square distribution with df degrees of freedom (common/chi_square.h).
inline double chi_square_p_value(double x, int df) { return chi_square_survival(x, df); }

}  // namespace baton::testing
