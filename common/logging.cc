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

std::string printable(std::string_view text, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace baton
