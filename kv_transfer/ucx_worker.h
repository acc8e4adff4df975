// UcxWorker: one UCP context with its one worker, as the UCX transports use them — RMA (+ wake-up)
// features, a worker driven by exactly one thread at a time, memory registration, and the wait
// that sleeps until the worker has events, another thread calls wake(), or a deadline passes.
//
//   for (;;) { handle work; worker.progress(); worker.wait(deadline); }
//
// Internal to kv_transfer (it exposes UCX types). Must not: spin or sleep-poll while idle (wait()
// blocks in epoll on the worker's event fd); be driven by two threads at once.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_transfer/transport.h"

namespace baton::kv {

// An eventfd that wakes a UcxWorker::wait() from any thread; shared so that a producer that
// outlives the worker can still signal it harmlessly. Each signal() is a write: a producer that
// wants one per batch keeps its own flag, cleared under the same lock with which the waiter takes
// the batch (see CommandQueue).
class WakeFd {
 public:
  static absl::StatusOr<std::shared_ptr<WakeFd>> create();
  ~WakeFd();
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;

  void signal();  // any thread
  void drain();   // the waiting thread, after it woke
  int fd() const { return fd_; }

 private:
  explicit WakeFd(int fd) : fd_(fd) {}
  int fd_;
};

// Maps a UCX status to an absl::Status: connection-level failures to UNAVAILABLE, timeouts to
// DEADLINE_EXCEEDED, cancellation to CANCELLED, bad arguments to INVALID_ARGUMENT, else INTERNAL.
absl::Status ucs_to_status(ucs_status_t status, std::string_view what);

struct UcxWorkerOptions {
  // Replaces UCX_TLS for this context (the shared-memory one, ucx_shm.h); nullopt: as configured.
  std::optional<std::string> tls;
  // The context allocates pool memory (ucp_mem_map with UCP_MEM_MAP_ALLOCATE) only from
  // shared-memory domains, and its memory calls may come from any thread.
  bool shared_memory_allocator = false;
};

class UcxWorker {
 public:
  // `who` names the owner in errors ("ucx receiver", "ucx sender").
  static absl::StatusOr<std::unique_ptr<UcxWorker>> create(std::string_view who, const UcxWorkerOptions& options = {});
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  const std::shared_ptr<WakeFd>& wake_fd() const { return wake_; }

  // Registers a region for RMA (once per pool; deregistered with unmap()).
  absl::StatusOr<ucp_mem_h> map(const MemoryRegion& region);
  // Allocates and registers `bytes` (page-aligned, zero-filled); unmap() frees it.
  absl::StatusOr<ucp_mem_h> allocate(std::size_t bytes, std::string_view name, void** base);
  void unmap(ucp_mem_h memh);
  // The worker's address, for a peer's ucp_ep_create.
  absl::StatusOr<std::string> address() const;

  // Calls ucp_worker_progress until it reports nothing more to do (on `other` too, see below).
  void progress();
  // Sleeps until the worker (or `other`) has events, wake_fd() is signalled, or `until` (never
  // when nullopt). Returns at once when a worker cannot be armed (events are pending: progress
  // again).
  void wait(std::optional<Deadline> until);
  // From now on progress() and wait() drive `other` too (a second worker of the same owner, on the
  // same thread). `other` must outlive this worker's use.
  absl::Status drive_also(UcxWorker* other);

 private:
  UcxWorker() = default;
  std::string who_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int epoll_fd_ = -1;
  std::shared_ptr<WakeFd> wake_;
  bool arm_failed_ = false;
  UcxWorker* other_ = nullptr;
};

}  // namespace baton::kv
