#include "decode_node/kv_receivers.h"

#include <memory>

#include <algorithm>

#include "common/status.h"
#include "decode_node/ucx_kv_memory.h"
#include "kv_transfer/grpc_transport.h"
#include "kv_transfer/ucx_transport.h"

namespace baton {

absl::StatusOr<KvReceiverSetup> prepare_kv_receivers(const std::vector<std::string>& kinds, EngineConfig& config) {
  KvReceiverSetup setup;
  if (std::find(kinds.begin(), kinds.end(), "ucx") == kinds.end()) return setup;
  auto shm = kv::UcxShmMemory::create();
  if (!shm.ok()) return absl::Status(shm.status().code(), str_cat("UCX KV transport: ", shm.status().message()));
  setup.ucx_shm = std::move(*shm);
  if (setup.ucx_shm) config.kv_memory = make_ucx_kv_memory_provider(setup.ucx_shm);
  return setup;
}

absl::Status add_kv_receivers(const std::vector<std::string>& kinds, const KvReceiverSetup& setup,
                              DecodeService& service) {
  for (const std::string& kind : kinds) {
    if (kind == "ucx") {
      auto ucx = kv::UcxKvReceiver::create(service.regions(), setup.ucx_shm);
      if (!ucx.ok()) return absl::Status(ucx.status().code(), str_cat("UCX KV transport: ", ucx.status().message()));
      service.add_receiver(std::move(*ucx));
    } else if (kind == "grpc") {
      auto grpc_receiver = std::make_unique<kv::GrpcKvReceiver>(
          service.regions(), [&service](const std::string& id, std::int32_t pool, std::uint64_t offset, std::uint64_t bytes) {
            return service.check_write(id, pool, offset, bytes);
          });
      kv::GrpcKvReceiver* raw = grpc_receiver.get();
      service.set_push_handler([raw](grpc::ServerContext* ctx, grpc::ServerReader<node::v1::KvChunk>* reader,
                                     node::v1::PushKvResponse* response) { return raw->handle_push(ctx, reader, response); });
      service.add_receiver(std::move(grpc_receiver));
    } else {
      return absl::InvalidArgumentError(str_cat("unknown KV transport '", kind, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
