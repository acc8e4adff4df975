// Typed field access for tokenizer.json / tokenizer_config.json with errors that name the file,
// the JSON path and the expected type. Shared by every component factory of tokenizer/.
//
// Must not: accept a wrong type silently (a "false" where a string is expected is an error).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::json_fields {

inline absl::Status type_error(const std::string& where, std::string_view key, std::string_view expected,
                               const nlohmann::json& got) {
  return absl::InvalidArgumentError(str_cat(where, ".", key, ": expected ", expected, ", got ",
                                            got.type_name(), " (", got.dump().substr(0, 80), ")"));
}

inline absl::StatusOr<std::string> get_string(const nlohmann::json& obj, const std::string& where,
                                              std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::InvalidArgumentError(str_cat(where, ": missing field \"", key, "\""));
  if (!it->is_string()) return type_error(where, key, "a string", *it);
  return it->get<std::string>();
}

inline absl::StatusOr<std::string> get_string_or(const nlohmann::json& obj, const std::string& where,
                                                 std::string_view key, std::string fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) return type_error(where, key, "a string", *it);
  return it->get<std::string>();
}

inline absl::StatusOr<bool> get_bool_or(const nlohmann::json& obj, const std::string& where,
                                        std::string_view key, bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return type_error(where, key, "true or false", *it);
  return it->get<bool>();
}

inline absl::StatusOr<long long> get_int_or(const nlohmann::json& obj, const std::string& where,
                                            std::string_view key, long long fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return type_error(where, key, "an integer", *it);
  return it->get<long long>();
}

inline absl::StatusOr<std::string> get_type(const nlohmann::json& obj, const std::string& where) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(str_cat(where, ": expected an object, got ", obj.type_name()));
  }
  return get_string(obj, where, "type");
}

inline absl::Status unsupported(const std::string& where, std::string_view kind, std::string_view type,
                                std::string_view supported) {
  return absl::UnimplementedError(str_cat(where, ": ", kind, " type \"", type,
                                          "\" is not supported by Baton's tokenizer (supported: ", supported,
                                          "); tokenizing with it would silently change token ids"));
}

}  // namespace baton::json_fields
