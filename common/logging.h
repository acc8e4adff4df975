// The one logger: spdlog's default logger, writing to stderr (stdout is for results, e.g. --json).
// Call init_logging() once from main(); library code just uses spdlog::info/warn/error.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace baton {

// level: trace, debug, info, warn, error, off.
absl::Status init_logging(std::string_view level);

}  // namespace baton
