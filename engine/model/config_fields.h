// config_fields: typed readers of config.json fields for ModelConfig's parsers — each returns the
// field's value, the fallback when it is absent or null, or an error naming the file and the key.
//
// Must not: know any architecture (the parsers in config.cc and config_<family>.cc do).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace baton {

// "<where>: `<key>` <what>" as InvalidArgument.
absl::Status field_error(const std::string& where, const std::string& key, const std::string& what);
// A positive integer field; `fallback` when absent (nullopt: required).
absl::StatusOr<std::int32_t> get_positive_int(const nlohmann::json& j, const std::string& where, const std::string& key,
                                              std::optional<std::int32_t> fallback = std::nullopt);
absl::StatusOr<double> get_number(const nlohmann::json& j, const std::string& where, const std::string& key,
                                  double fallback);
absl::StatusOr<bool> get_bool(const nlohmann::json& j, const std::string& where, const std::string& key, bool fallback);
// "`key` (value) ... at most `limit`" when value > limit.
absl::Status check_at_most(const std::string& where, const std::string& key, std::int64_t value, std::int64_t limit);
// A string field; `fallback` when absent.
absl::StatusOr<std::string> get_string(const nlohmann::json& j, const std::string& where, const std::string& key,
                                       const std::string& fallback);

// config.json text as Python's json module writes it, made standard JSON: the bare tokens
// Infinity, -Infinity and NaN outside strings (Hugging Face writes e.g. Mamba's
// time_step_limit [0.0, Infinity]) become ±1e308 and null, so nlohmann can parse it.
std::string standardize_python_json(const std::string& text);

}  // namespace baton
