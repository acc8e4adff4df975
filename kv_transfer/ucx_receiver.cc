// UcxKvReceiver (ucx_transport.h): registers the decode node's pools, publishes their keys in the
// descriptor, and progresses its worker on one thread so that software-emulated RMA (tcp) lands.
// Must not: spin while idle (the thread sleeps on the worker's event fd).
#include <atomic>
#include <thread>

#include "common/status.h"
#include "kv_transfer/ucx_descriptor.h"
#include "kv_transfer/ucx_transport.h"
#include "kv_transfer/ucx_worker.h"
#include "spdlog/spdlog.h"

namespace baton::kv {

struct UcxKvReceiver::Impl {
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

absl::StatusOr<std::unique_ptr<UcxKvReceiver>> UcxKvReceiver::create(std::vector<MemoryRegion> pools) {
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
    void* packed = nullptr;
    std::size_t packed_len = 0;
    ucs_status_t st = ucp_rkey_pack(impl->worker->context(), memh, &packed, &packed_len);
    if (st != UCS_OK) return ucs_to_status(st, str_cat("ucx receiver: ucp_rkey_pack of pool ", pool.name));
    UcxRemotePool remote;
    remote.name = pool.name;
    remote.base = reinterpret_cast<std::uintptr_t>(pool.base);
    remote.bytes = pool.bytes;
    remote.rkey.assign(static_cast<const char*>(packed), packed_len);
    ucp_rkey_buffer_release(packed);
    desc.pools.push_back(std::move(remote));
  }
  impl->descriptor = encode_ucx_descriptor(desc);

  Impl* raw = impl.get();
  impl->progress_thread = std::thread([raw] { raw->run(); });
  spdlog::debug("ucx receiver: {} pools registered, descriptor {} bytes", pools.size(),
                impl->descriptor.size());
  return std::unique_ptr<UcxKvReceiver>(new UcxKvReceiver(std::move(impl)));
}

}  // namespace baton::kv
