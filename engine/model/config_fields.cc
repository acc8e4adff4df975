#include "engine/model/config_fields.h"

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton {

using nlohmann::json;

absl::Status field_error(const std::string& where, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(str_cat(where, ": `", key, "` ", what));
}


absl::StatusOr<std::int32_t> get_positive_int(const json& j, const std::string& where, const std::string& key,
                                              std::optional<std::int32_t> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return field_error(where, key, "is missing");
  }
  if (!it->is_number_integer() || it->get<std::int64_t>() <= 0 || it->get<std::int64_t>() > INT32_MAX) {
    return field_error(where, key, str_cat("must be a positive integer, got ", it->dump()));
  }
  return static_cast<std::int32_t>(it->get<std::int64_t>());
}

absl::StatusOr<double> get_number(const json& j, const std::string& where, const std::string& key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return field_error(where, key, str_cat("must be a number, got ", it->dump()));
  return it->get<double>();
}

absl::StatusOr<bool> get_bool(const json& j, const std::string& where, const std::string& key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return field_error(where, key, str_cat("must be true or false, got ", it->dump()));
  return it->get<bool>();
}

absl::Status check_at_most(const std::string& where, const std::string& key, std::int64_t value, std::int64_t limit) {
  if (value <= limit) return absl::OkStatus();
  return field_error(where, key, str_cat("(", value, ") is more than the ", limit, " Baton's kernels support"));
}

absl::StatusOr<std::string> get_string(const json& j, const std::string& where, const std::string& key,
                                       const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return field_error(where, key, str_cat("must be a string, got ", it->dump()));
  return it->get<std::string>();
}

std::string standardize_python_json(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (text.compare(i, 8, "Infinity") == 0) {
      out += "1e308";
      i += 7;
      continue;
    } else if (text.compare(i, 3, "NaN") == 0) {
      out += "null";
      i += 2;
      continue;
    }
    out += ch;
  }
  return out;
}

}  // namespace baton
