// The `--transport` flag of the nodes: "ucx", "grpc", or both comma-separated, preferred first; or
// "nccl" alone (it moves the pools' device memory, the others host memory: a node's pools are one
// or the other).
// Must not: create transports (prefill_node/kv_senders.h and decode_node/kv_receivers.h do).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace baton {

// "ucx,grpc" -> {"ucx", "grpc"}; InvalidArgument naming an unknown or repeated one.
absl::StatusOr<std::vector<std::string>> parse_transport_list(const std::string& flag);

// FAILED_PRECONDITION when `kinds` has nccl and the model does not run on a CUDA device (NCCL
// moves GPU memory).
absl::Status check_transport_device(const std::vector<std::string>& kinds, Device device);

}  // namespace baton
