#include "prefill_node/kv_senders.h"

#include "common/status.h"
#include "kv_transfer/grpc_transport.h"
#include "kv_transfer/ucx_transport.h"
#include "kv_transfer/kv_link_transport.h"
#include "kv_transfer/nccl_kv_link.h"
#include "node_common/kv_transports.h"

namespace baton {

absl::StatusOr<std::map<std::string, std::unique_ptr<kv::KvSender>>> make_kv_senders(
    const std::vector<std::string>& kinds, const std::vector<kv::MemoryRegion>& local_pools, Device device) {
  std::map<std::string, std::unique_ptr<kv::KvSender>> senders;
  for (const std::string& kind : kinds) {
    if (kind == "ucx") {
      auto ucx = kv::UcxKvSender::create(local_pools);
      if (!ucx.ok()) return absl::Status(ucx.status().code(), str_cat("UCX KV transport: ", ucx.status().message()));
      senders.emplace(kind, std::move(*ucx));
    } else if (kind == "grpc") {
      senders.emplace(kind, std::make_unique<kv::GrpcKvSender>(local_pools));
    } else if (kind == "nccl") {
      BATON_RETURN_IF_ERROR(check_transport_device(kinds, device));
      BATON_ASSIGN_OR_RETURN(auto factory, kv::make_nccl_link_factory(kv::NcclLinkOptions{device.index}));
      senders.emplace(kind, std::make_unique<kv::LinkKvSender>(local_pools, std::move(factory)));
    } else {
      return absl::InvalidArgumentError(str_cat("unknown KV transport '", kind, "'"));
    }
  }
  return senders;
}

}  // namespace baton
