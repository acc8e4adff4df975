// Status helpers shared by every layer: early-return macros over absl::Status / absl::StatusOr
// and BATON_CHECK for invariants that, if broken, mean a bug in Baton (never for bad input).
//
// Bad input (files, configs, requests, peer messages) must come back as an absl::Status whose
// message names what and where; BATON_CHECK aborts the process and is reserved for our own bugs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define BATON_CONCAT_INNER_(a, b) a##b
#define BATON_CONCAT_(a, b) BATON_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define BATON_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::absl::Status baton_status_ = (expr);       \
    if (!baton_status_.ok()) return baton_status_; \
  } while (0)

// `lhs = value of expr` when OK; otherwise returns its status from the enclosing function.
#define BATON_ASSIGN_OR_RETURN(lhs, expr) \
  BATON_ASSIGN_OR_RETURN_IMPL_(BATON_CONCAT_(baton_statusor_, __LINE__), lhs, expr)
#define BATON_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

namespace baton {

// Concatenates anything streamable into a string (for error messages). Debian's Abseil is built
// with its own absl::string_view, which absl::StrCat will not take from std::string_view.
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  ((out << args), ...);
  return out.str();
}

}  // namespace baton

namespace baton::internal {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& message) {
  std::fprintf(stderr, "%s:%d: BATON_CHECK(%s) failed: %s\n", file, line, cond, message.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace baton::internal

// Aborts with the condition, location and a message built from the remaining arguments (StrCat).
#define BATON_CHECK(cond, ...)                                                    \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      ::baton::internal::check_failed(__FILE__, __LINE__, #cond,                  \
                                      ::baton::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                             \
  } while (0)
