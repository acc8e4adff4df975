// Reading small text files (configs, manifests) whole; errors name the path.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace baton {

absl::StatusOr<std::string> read_text_file(const std::string& path);

}  // namespace baton
