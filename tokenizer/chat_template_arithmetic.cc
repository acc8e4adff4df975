#include "tokenizer/chat_template_arithmetic.h"

#include <limits>

#include "common/status.h"
#include "tokenizer/chat_template_value.h"

namespace baton::jinja {

std::int64_t int_arithmetic(const std::string& op, std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(a, b, &r);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(a, b, &r);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(a, b, &r);
  } else if (op == "//" || op == "%") {
    if (b == 0) throw TemplateError(str_cat("division by zero in ", op));
    if (b == -1) {
      // INT64_MIN / -1 overflows (and traps on x86); x % -1 is always 0.
      if (op == "%") return 0;
      if (a == std::numeric_limits<std::int64_t>::min()) overflow = true;
      else return -a;
    } else if (op == "//") {
      r = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) --r;  // floor, as Python
    } else {
      r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;  // the sign of the divisor, as Python
    }
  } else if (op == "**") {
    if (b < 0) throw TemplateError("integer '**' needs a non-negative exponent");
    // Exact, by squaring (std::pow's double loses digits past 2^53). Once the base's square
    // overflows while exponent bits remain, the result would too (|base| >= 2 then).
    std::int64_t base = a;
    r = 1;
    for (std::int64_t e = b; e > 0 && !overflow; e >>= 1) {
      if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
      if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
    }
  } else {
    throw TemplateError(str_cat("unsupported integer operator ", op));
  }
  if (overflow) throw TemplateError(str_cat("integer overflow in '", op, "' (", a, " ", op, " ", b, ")"));
  return r;
}

std::int64_t int_negate(std::int64_t a, const std::string& what) {
  if (a == std::numeric_limits<std::int64_t>::min()) throw TemplateError(str_cat("integer overflow in ", what, " of ", a));
  return -a;
}

std::int64_t float_to_int(double d, const std::string& what) {
  // [-2^63, 2^63) is exactly the doubles that convert; NaN fails both comparisons.
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
    throw TemplateError(str_cat(what, ": ", python_float_repr(d), " does not fit in a 64-bit integer"));
  }
  return static_cast<std::int64_t>(d);
}

}  // namespace baton::jinja
