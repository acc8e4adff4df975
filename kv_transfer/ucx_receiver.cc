// UcxKvReceiver (ucx_transport.h): registers the decode node's pools, publishes their keys in the
// descriptor (the shared-memory section too when the pools are UcxShmMemory's), and progresses its
// workers on one thread so that software-emulated RMA (tcp) lands.
// Must not: spin while idle (the thread sleeps on the workers' event fds).
#include <atomic>
#include <thread>

#include "common/status.h"
#include "kv_transfer/ucx_descriptor.h"
#include "kv_transfer/ucx_shm_domain.h"
#include "kv_transfer/ucx_transport.h"
#include "kv_transfer/ucx_worker.h"
#include "spdlog/spdlog.h"

namespace baton::kv {

namespace {

absl::StatusOr<std::string> pack_rkey(UcxWorker& worker, ucp_mem_h memh, std::string_view what) {
  void* packed = nullptr;
  std::size_t packed_len = 0;
  ucs_status_t st = ucp_rkey_pack(worker.context(), memh, &packed, &packed_len);
  if (st != UCS_OK) return ucs_to_status(st, str_cat("ucx receiver: ucp_rkey_pack of ", what));
  std::string out(static_cast<const char*>(packed), packed_len);
  ucp_rkey_buffer_release(packed);
  return out;
}

// The shared-memory section when every pool is memory `shm` allocated (keys of its own
// registrations); nullopt when some pool is not (it was allocated elsewhere).
absl::StatusOr<std::optional<UcxShmSection>> shm_section(UcxShmMemory& shm, const std::vector<MemoryRegion>& pools) {
  UcxShmMemory::Impl& domain = shm.impl();
  UcxShmSection section;
  for (const MemoryRegion& pool : pools) {
    std::optional<ucp_mem_h> memh = domain.find(pool);
    if (!memh) {
      spdlog::warn("ucx receiver: pool {} is not in UCX shared memory; same-host senders use the network path",
                   pool.name);
      return std::optional<UcxShmSection>();
    }
    BATON_ASSIGN_OR_RETURN(std::string rkey, pack_rkey(*domain.worker, *memh, str_cat("shared-memory pool ", pool.name)));
    section.rkeys.push_back(std::move(rkey));
  }
  BATON_ASSIGN_OR_RETURN(section.worker_address, domain.worker->address());
  return std::optional<UcxShmSection>(std::move(section));
}

}  // namespace

struct UcxKvReceiver::Impl {
  std::shared_ptr<UcxShmMemory> shm;  // before `worker`: the worker drives its worker
  std::unique_ptr<UcxWorker> worker;
  std::vector<ucp_mem_h> memh;
  std::string descriptor;
  std::atomic<bool> stop{false};
  std::thread progress_thread;

  ~Impl() {
    if (progress_thread.joinable()) {
      stop.store(true);
      worker->wake_fd()->signal();
      progress_thread.join();
    }
    for (ucp_mem_h m : memh) worker->unmap(m);
  }

  void run() {
    // Idle: asleep in epoll. Remote puts, wire-up and peer failures wake it through the event fd.
    while (!stop.load(std::memory_order_acquire)) {
      worker->progress();
      worker->wait(std::nullopt);
    }
  }
};

UcxKvReceiver::UcxKvReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UcxKvReceiver::~UcxKvReceiver() = default;

const std::string& UcxKvReceiver::descriptor() const { return impl_->descriptor; }

absl::StatusOr<std::unique_ptr<UcxKvReceiver>> UcxKvReceiver::create(std::vector<MemoryRegion> pools,
                                                                     std::shared_ptr<UcxShmMemory> shm) {
  if (pools.empty()) return absl::InvalidArgumentError("ucx receiver: no pools given");
  for (std::size_t i = 0; i < pools.size(); ++i) {
    if (pools[i].base == nullptr || pools[i].bytes == 0) {
      return absl::InvalidArgumentError(
          str_cat("ucx receiver: pool ", i, " (", pools[i].name, ") is empty or has no memory"));
    }
  }
  auto impl = std::make_unique<Impl>();
  BATON_ASSIGN_OR_RETURN(impl->worker, UcxWorker::create("ucx receiver"));

  UcxDescriptor desc;
  BATON_ASSIGN_OR_RETURN(desc.worker_address, impl->worker->address());
  for (const MemoryRegion& pool : pools) {
    BATON_ASSIGN_OR_RETURN(ucp_mem_h memh, impl->worker->map(pool));
    impl->memh.push_back(memh);
    UcxRemotePool remote;
    remote.name = pool.name;
    remote.base = reinterpret_cast<std::uintptr_t>(pool.base);
    remote.bytes = pool.bytes;
    BATON_ASSIGN_OR_RETURN(remote.rkey, pack_rkey(*impl->worker, memh, str_cat("pool ", pool.name)));
    desc.pools.push_back(std::move(remote));
  }
  if (shm) {
    BATON_ASSIGN_OR_RETURN(desc.shm, shm_section(*shm, pools));
    if (desc.shm) {
      BATON_RETURN_IF_ERROR(impl->worker->drive_also(shm->impl().worker.get()));
      impl->shm = std::move(shm);
    }
  }
  impl->descriptor = encode_ucx_descriptor(desc);

  Impl* raw = impl.get();
  impl->progress_thread = std::thread([raw] { raw->run(); });
  spdlog::info("ucx receiver: {} pools registered, descriptor {} bytes, shared-memory path {}", pools.size(),
               impl->descriptor.size(), desc.shm ? "offered" : "not offered");
  return std::unique_ptr<UcxKvReceiver>(new UcxKvReceiver(std::move(impl)));
}

}  // namespace baton::kv
