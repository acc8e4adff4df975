// The one logger: spdlog's default logger, writing to stderr (stdout is for results, e.g. --json).
// Call init_logging() once from main(); library code just uses spdlog::info/warn/error.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace baton {

// level: trace, debug, info, warn, error, off.
absl::Status init_logging(std::string_view level);

// Text a client chose (a path, a name), safe to log: control characters, quotes, backslashes and
// bytes outside printable ASCII as \xNN, cut to `max_bytes` with "..." (so it cannot forge or
// flood a log line).
std::string printable(std::string_view text, std::size_t max_bytes = 256);

}  // namespace baton
