// The KV receivers a decode node offers (UCX, gRPC), writing into its engine's pools; the first
// listed is the one a Reserve without a transport gets. The gRPC receiver writes through the
// service's PushKv and checks every write against the service's reservations.
// Must not: outlive the service.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "decode_node/decode_service.h"

namespace baton {

absl::Status add_kv_receivers(const std::vector<std::string>& kinds, DecodeService& service);

}  // namespace baton
