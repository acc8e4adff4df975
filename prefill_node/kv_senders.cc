#include "prefill_node/kv_senders.h"

namespace baton {

absl::StatusOr<std::map<std::string, std::unique_ptr<kv::KvSender>>> make_kv_senders(
    const std::vector<std::string>& kinds, const std::vector<kv::MemoryRegion>& local_pools) {
  (void)kinds;
  (void)local_pools;
  return absl::UnimplementedError("KV transports are not wired yet");
}

}  // namespace baton
