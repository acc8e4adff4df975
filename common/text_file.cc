#include "common/text_file.h"

#include <fstream>
#include <sstream>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton {

absl::StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(str_cat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(str_cat(path, ": read error"));
  return ss.str();
}

absl::StatusOr<nlohmann::json> read_json_object_file(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(str_cat(path, ": not a JSON object"));
  return j;
}

}  // namespace baton
