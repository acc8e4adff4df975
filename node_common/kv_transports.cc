#include "node_common/kv_transports.h"

#include <algorithm>

#include "absl/strings/str_split.h"
#include "common/status.h"

namespace baton {

absl::StatusOr<std::vector<std::string>> parse_transport_list(const std::string& flag) {
  std::vector<std::string> kinds;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    const std::string kind(part);
    if (kind != "ucx" && kind != "grpc") {
      return absl::InvalidArgumentError(str_cat("--transport: '", kind, "' is not a KV transport (ucx, grpc)"));
    }
    if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) {
      return absl::InvalidArgumentError(str_cat("--transport: '", kind, "' is listed twice"));
    }
    kinds.push_back(kind);
  }
  return kinds;
}

}  // namespace baton
