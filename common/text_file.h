// Reading small text files (configs, manifests) whole; errors name the path.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace baton {

absl::StatusOr<std::string> read_text_file(const std::string& path);
// A file holding one JSON object (a model's config.json); anything else is an error naming the path.
absl::StatusOr<nlohmann::json> read_json_object_file(const std::string& path);

}  // namespace baton
