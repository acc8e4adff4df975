// The KV receivers a decode node offers (UCX, gRPC, or NCCL alone), writing into its engine's
// pools; the first listed is the one a Reserve without a transport gets. The gRPC and NCCL
// receivers are steered through the service's PushKv and KvLink and check every write against the
// service's reservations; NCCL writes the pools' device memory (no host mirrors).
// Set-up is in two phases: prepare_kv_receivers() before the engine is created (UCX: its
// shared-memory context, from which the engine's KV pools — or, on a GPU, their host mirrors —
// are then allocated through EngineConfig::kv_memory, so that a prefill node on the same host
// writes them with memory copies), add_kv_receivers() once the service holds the engine.
// Must not: outlive the service.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decode_node/decode_service.h"
#include "engine/engine.h"
#include "kv_transfer/ucx_shm_memory.h"

namespace baton {

// What the receivers set up before the engine.
struct KvReceiverSetup {
  std::shared_ptr<kv::UcxShmMemory> ucx_shm;  // null: no UCX, or UCX_TLS has no shared memory
  Device device;                              // where NCCL finds the pools
};

// Sets config.kv_memory when `kinds` has ucx and shared memory is usable, and
// config.kv_transfer_in_device_memory when it has nccl.
absl::StatusOr<KvReceiverSetup> prepare_kv_receivers(const std::vector<std::string>& kinds, EngineConfig& config);
absl::Status add_kv_receivers(const std::vector<std::string>& kinds, const KvReceiverSetup& setup,
                              DecodeService& service);

}  // namespace baton
