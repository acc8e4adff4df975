// UcxShmMemory (ucx_shm_memory.h): the shared-memory context and its allocations.
// Must not: free a region while a copy of its owner lives.
#include "kv_transfer/ucx_shm_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "kv_transfer/ucx_shm_domain.h"
#include "spdlog/spdlog.h"

namespace baton::kv {

std::optional<std::string> shared_memory_transports(const char* ucx_tls) {
  // UCX's names for shared-memory transports ("sm"/"shm"/"mm" are aliases). cma and the kernel
  // modules carry only zero-copy RMA: an endpoint needs posix or sysv beside them.
  static const std::set<std::string, std::less<>> kShm = {"sm", "shm", "mm", "posix", "sysv", "cma", "xpmem", "knem"};
  static const std::set<std::string, std::less<>> kCarriers = {"sm", "shm", "mm", "posix", "sysv"};
  std::string tls = ucx_tls == nullptr ? "" : ucx_tls;
  if (tls.empty()) return "sm";
  if (tls.front() == '^') {  // an exclusion list: keep all shared memory unless it excludes some
    for (const std::string& name : std::vector<std::string>(absl::StrSplit(tls.substr(1), ',', absl::SkipEmpty()))) {
      if (kShm.contains(name)) return std::nullopt;
    }
    return "sm";
  }
  std::vector<std::string> kept;
  bool carrier = false;
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(tls, ',', absl::SkipEmpty()))) {
    if (name == "all") return "sm";
    if (kShm.contains(name)) kept.emplace_back(name);
    carrier = carrier || kCarriers.contains(name);
  }
  if (!carrier) return std::nullopt;
  return absl::StrJoin(kept, ",");
}

absl::StatusOr<std::shared_ptr<UcxShmMemory>> UcxShmMemory::create() {
  std::optional<std::string> tls = shared_memory_transports(std::getenv("UCX_TLS"));
  if (!tls) {
    spdlog::info("ucx: UCX_TLS={} has no shared-memory transport; KV puts use the network path only",
                 std::getenv("UCX_TLS"));
    return std::shared_ptr<UcxShmMemory>();
  }
  auto impl = std::make_shared<Impl>();
  UcxWorkerOptions options;
  options.tls = *tls;
  options.shared_memory_allocator = true;
  BATON_ASSIGN_OR_RETURN(impl->worker, UcxWorker::create("ucx shared-memory receiver", options));
  return std::shared_ptr<UcxShmMemory>(new UcxShmMemory(std::move(impl)));
}

UcxShmMemory::~UcxShmMemory() = default;

absl::StatusOr<OwnedRegion> UcxShmMemory::allocate(std::size_t bytes, std::string_view name) {
  if (bytes == 0) return absl::InvalidArgumentError(str_cat("ucx shared memory: pool ", name, " of 0 bytes"));
  void* base = nullptr;
  BATON_ASSIGN_OR_RETURN(ucp_mem_h memh, impl_->worker->allocate(bytes, name, &base));
  // Commit the pages in this process now, as the CPU's other KV memory is: otherwise every 4 KiB
  // page a peer wrote faults on its first read here, inside a decode step or a GPU node's commit
  // (copying a prompt's KV out of a host mirror). A shared-memory file system too small for the
  // pool says so here, as an error
  // (the caller falls back to private memory), not as a SIGBUS later. Kernels before 5.14 lack
  // MADV_POPULATE_WRITE (EINVAL): the pages then fault in as before.
  if (madvise(base, bytes, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
    const int err = errno;
    impl_->worker->unmap(memh);
    return absl::ResourceExhaustedError(str_cat("ucx shared memory: committing pool ", name, " (", bytes,
                                                " bytes): ", std::strerror(err)));
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->allocations[base] = Impl::Allocation{bytes, memh};
  }
  OwnedRegion out;
  out.base = base;
  out.bytes = bytes;
  // The owner keeps the context alive: the engine may free its pools after the receiver is gone.
  std::shared_ptr<Impl> impl = impl_;
  out.owner = std::shared_ptr<void>(base, [impl, memh](void* p) {
    {
      std::lock_guard lock(impl->mu);
      impl->allocations.erase(p);
    }
    impl->worker->unmap(memh);
  });
  spdlog::debug("ucx shared memory: pool {} ({} bytes) at {}", name, bytes, base);
  return out;
}

}  // namespace baton::kv
