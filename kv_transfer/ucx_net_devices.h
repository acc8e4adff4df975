// Keeping UCX's own listeners on the address a node was told to serve on. UCX's TCP transport
// listens on every network device it finds (UCX_NET_DEVICES=all), so a node started with
// --host 127.0.0.1 still accepted KV connections on its external interface. Before the first UCX
// context exists, restrict_ucx_to_host() sets UCX_NET_DEVICES to the one device that holds
// --host's address (e.g. "lo" for 127.0.0.1).
//
// It does nothing for a wildcard host (0.0.0.0, ::: every device) or when UCX_NET_DEVICES is set
// already (an operator's choice, e.g. RDMA devices, wins). Must not: be called once threads that
// read the environment run (it sets an environment variable).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace baton::kv {

// The device chosen ("" when nothing was restricted, and why in `why`). NOT_FOUND when no
// device of this machine has that address (the node's gRPC server would fail to listen too).
absl::StatusOr<std::string> restrict_ucx_to_host(const std::string& host, std::string* why = nullptr);

}  // namespace baton::kv
