// Python's integer arithmetic on int64 for the chat-template interpreter: exact where Python's
// unbounded integers would be, and a TemplateError naming the operation where the result would not
// fit in 64 bits (never a silent wrap, never a trap on INT64_MIN / -1).
//
// Must not: touch Values or know of templates beyond the error it throws.
#pragma once

#include <cstdint>
#include <string>

namespace baton::jinja {

// Python's integer operators on int64: op is one of + - * // % ** (** with b >= 0, // and % with
// b != 0). Python's integers have no bound; where its result would not fit in 64 bits this throws
// TemplateError("integer overflow in '+'") instead of overflowing.
std::int64_t int_arithmetic(const std::string& op, std::int64_t a, std::int64_t b);
std::int64_t int_negate(std::int64_t a, const std::string& what);
// A float converted to an integer as Python's int(): truncated toward zero; TemplateError naming
// `what` when it is NaN, infinite or outside the int64 range.
std::int64_t float_to_int(double d, const std::string& what);

}  // namespace baton::jinja
