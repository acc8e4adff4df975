// What UcxShmMemory keeps (ucx_shm_memory.h), for the receiver that publishes its memory:
// the shared-memory worker and the registration of every region it allocated. Internal to
// kv_transfer (it exposes UCX types). Must not: unmap a region while its owner lives.
#pragma once

#include <ucp/api/ucp.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "kv_transfer/transport.h"
#include "kv_transfer/ucx_shm_memory.h"
#include "kv_transfer/ucx_worker.h"

namespace baton::kv {

struct UcxShmMemory::Impl {
  std::unique_ptr<UcxWorker> worker;
  std::mutex mu;
  struct Allocation {
    std::size_t bytes = 0;
    ucp_mem_h memh = nullptr;
  };
  std::map<const void*, Allocation> allocations;  // by base address

  // The registration covering `region` when this domain allocated it, else nullopt.
  std::optional<ucp_mem_h> find(const MemoryRegion& region) {
    std::lock_guard lock(mu);
    auto it = allocations.find(region.base);
    if (it == allocations.end() || region.bytes > it->second.bytes) return std::nullopt;
    return it->second.memh;
  }
};

}  // namespace baton::kv
