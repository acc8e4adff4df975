#include "common/logging.h"

#include "common/status.h"

#include <string>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace baton {

absl::Status init_logging(std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        str_cat("unknown log level '", level, "' (use trace, debug, info, warn, error, off)"));
  }
  auto logger = spdlog::get("baton");
  if (!logger) logger = spdlog::stderr_color_mt("baton");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace baton
