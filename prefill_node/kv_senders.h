// The KV senders a prefill node offers (UCX, gRPC, or NCCL alone), sending from its engine's pools
// (their host memory, or with NCCL their device memory on `device`).
// Must not: decide which one a request uses (the decode node's destination says).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "kv_transfer/transport.h"

namespace baton {

absl::StatusOr<std::map<std::string, std::unique_ptr<kv::KvSender>>> make_kv_senders(
    const std::vector<std::string>& kinds, const std::vector<kv::MemoryRegion>& local_pools, Device device);

}  // namespace baton
