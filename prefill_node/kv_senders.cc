#include "prefill_node/kv_senders.h"

#include "common/status.h"
#include "kv_transfer/grpc_transport.h"
#include "kv_transfer/ucx_transport.h"

namespace baton {

absl::StatusOr<std::map<std::string, std::unique_ptr<kv::KvSender>>> make_kv_senders(
    const std::vector<std::string>& kinds, const std::vector<kv::MemoryRegion>& local_pools) {
  std::map<std::string, std::unique_ptr<kv::KvSender>> senders;
  for (const std::string& kind : kinds) {
    if (kind == "ucx") {
      auto ucx = kv::UcxKvSender::create(local_pools);
      if (!ucx.ok()) return absl::Status(ucx.status().code(), str_cat("UCX KV transport: ", ucx.status().message()));
      senders.emplace(kind, std::move(*ucx));
    } else if (kind == "grpc") {
      senders.emplace(kind, std::make_unique<kv::GrpcKvSender>(local_pools));
    } else {
      return absl::InvalidArgumentError(str_cat("unknown KV transport '", kind, "'"));
    }
  }
  return senders;
}

}  // namespace baton
