// The `--transport` flag of the nodes: "ucx", "grpc", or both comma-separated, preferred first.
// Must not: create transports (prefill_node/kv_senders.h and decode_node/kv_receivers.h do).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

// "ucx,grpc" -> {"ucx", "grpc"}; InvalidArgument naming an unknown or repeated one.
absl::StatusOr<std::vector<std::string>> parse_transport_list(const std::string& flag);

}  // namespace baton
