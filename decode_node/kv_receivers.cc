#include "decode_node/kv_receivers.h"

#include <memory>

#include <algorithm>

#include "common/status.h"
#include "decode_node/ucx_kv_memory.h"
#include "kv_transfer/grpc_transport.h"
#include "kv_transfer/kv_link_transport.h"
#include "kv_transfer/ucx_transport.h"
#include "kv_transfer/nccl_kv_link.h"
#include "node_common/kv_transports.h"

namespace baton {

absl::StatusOr<KvReceiverSetup> prepare_kv_receivers(const std::vector<std::string>& kinds, EngineConfig& config) {
  KvReceiverSetup setup;
  if (std::find(kinds.begin(), kinds.end(), "nccl") != kinds.end()) {
    // NCCL writes the pools' device memory itself: no host mirrors in between.
    BATON_RETURN_IF_ERROR(check_transport_device(kinds, config.backend.device));
    config.kv_transfer_in_device_memory = true;
    setup.device = config.backend.device;
  }
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
          service.regions(), [&service](const std::string& id, const std::string& capability, std::int32_t pool, std::uint64_t offset,
                     std::uint64_t bytes) { return service.check_write(id, capability, pool, offset, bytes); });
      kv::GrpcKvReceiver* raw = grpc_receiver.get();
      service.set_push_handler([raw](grpc::ServerContext* ctx, grpc::ServerReader<node::v1::KvChunk>* reader,
                                     node::v1::PushKvResponse* response) { return raw->handle_push(ctx, reader, response); });
      service.add_receiver(std::move(grpc_receiver));
    } else if (kind == "nccl") {
      BATON_RETURN_IF_ERROR(check_transport_device(kinds, setup.device));
      BATON_ASSIGN_OR_RETURN(auto factory, kv::make_nccl_link_factory(kv::NcclLinkOptions{setup.device.index}));
      auto link_receiver = std::make_unique<kv::LinkKvReceiver>(
          service.regions(), std::move(factory),
          [&service](const std::string& id, const std::string& capability, std::int32_t pool, std::uint64_t offset,
                     std::uint64_t bytes) { return service.check_write(id, capability, pool, offset, bytes); });
      kv::LinkKvReceiver* raw = link_receiver.get();
      service.set_link_handler(
          [raw](grpc::ServerContext* ctx, grpc::ServerReaderWriter<node::v1::KvLinkReply, node::v1::KvLinkMessage>* stream) {
            return raw->handle_link(ctx, stream);
          });
      service.add_receiver(std::move(link_receiver));
    } else {
      return absl::InvalidArgumentError(str_cat("unknown KV transport '", kind, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
