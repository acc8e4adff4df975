#include "node_common/kv_transports.h"

#include <algorithm>

#include "absl/strings/str_split.h"
#include "common/status.h"

namespace baton {

absl::StatusOr<std::vector<std::string>> parse_transport_list(const std::string& flag) {
  std::vector<std::string> kinds;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    const std::string kind(part);
    if (kind != "ucx" && kind != "grpc" && kind != "nccl") {
      return absl::InvalidArgumentError(str_cat("--transport: '", kind, "' is not a KV transport (ucx, grpc, nccl)"));
    }
    if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) {
      return absl::InvalidArgumentError(str_cat("--transport: '", kind, "' is listed twice"));
    }
    kinds.push_back(kind);
  }
  if (kinds.size() > 1 && std::find(kinds.begin(), kinds.end(), "nccl") != kinds.end()) {
    return absl::InvalidArgumentError(
        "--transport: nccl cannot be combined with another transport (NCCL moves the KV pools' device memory, "
        "ucx and grpc host memory)");
  }
  return kinds;
}

absl::Status check_transport_device(const std::vector<std::string>& kinds, Device device) {
  if (std::find(kinds.begin(), kinds.end(), "nccl") != kinds.end() && device.type != DeviceType::kCuda) {
    return absl::FailedPreconditionError(str_cat("--transport nccl needs --device cuda: NCCL moves KV between GPUs, and the model runs on ",
                                                 device_name(device)));
  }
  return absl::OkStatus();
}

}  // namespace baton
