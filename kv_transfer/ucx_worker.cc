// UcxWorker and WakeFd (ucx_worker.h). Must not: sleep without the worker armed.
#include "kv_transfer/ucx_worker.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton::kv {

absl::StatusOr<std::shared_ptr<WakeFd>> WakeFd::create() {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(str_cat("eventfd: ", std::strerror(errno)));
  return std::shared_ptr<WakeFd>(new WakeFd(fd));
}

WakeFd::~WakeFd() { close(fd_); }

void WakeFd::signal() {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
}

void WakeFd::drain() {
  std::uint64_t count = 0;
  [[maybe_unused]] ssize_t n = read(fd_, &count, sizeof(count));
}

absl::Status ucs_to_status(ucs_status_t status, std::string_view what) {
  std::string message = str_cat(what, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_OK:
      return absl::OkStatus();
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_TIMED_OUT:
      return absl::DeadlineExceededError(message);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_SOME_CONNECTS_FAILED:
      return absl::UnavailableError(message);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_OUT_OF_RANGE:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {

// ucp_config_read (which reads UCX_* from the environment) with this context's overrides.
absl::StatusOr<ucp_config_t*> read_config(std::string_view who, const UcxWorkerOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return ucs_to_status(st, str_cat(who, ": ucp_config_read"));
  std::vector<std::pair<const char*, std::string>> overrides;
  if (options.tls) overrides.emplace_back("TLS", *options.tls);
  // Only shared-memory domains may allocate: memory from mmap or the heap would not be writable
  // by a peer process, and puts into it would fall back to emulation through this worker.
  if (options.shared_memory_allocator) overrides.emplace_back("ALLOC_PRIO", "md:sysv,md:posix");
  for (const auto& [name, value] : overrides) {
    st = ucp_config_modify(config, name, value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return ucs_to_status(st, str_cat(who, ": ucp_config_modify(", name, "=", value, ")"));
    }
  }
  return config;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::create(std::string_view who, const UcxWorkerOptions& options) {
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  w->who_ = std::string(who);

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // RMA for the puts; WAKEUP for the event fd the idle thread sleeps on.
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  // An allocator's memory is freed by whoever owns it (the engine), on any thread.
  params.mt_workers_shared = options.shared_memory_allocator ? 1 : 0;
  BATON_ASSIGN_OR_RETURN(ucp_config_t* config, read_config(who, options));
  ucs_status_t st = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  if (st != UCS_OK) return ucs_to_status(st, str_cat(who, ": ucp_init"));

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread drives the worker; it is created and destroyed on another (never concurrently).
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucp_worker_create(w->context_, &worker_params, &w->worker_);
  if (st != UCS_OK) return ucs_to_status(st, str_cat(who, ": ucp_worker_create"));

  int worker_fd = -1;
  st = ucp_worker_get_efd(w->worker_, &worker_fd);
  if (st != UCS_OK) return ucs_to_status(st, str_cat(who, ": ucp_worker_get_efd"));
  BATON_ASSIGN_OR_RETURN(w->wake_, WakeFd::create());

  w->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (w->epoll_fd_ < 0) return absl::InternalError(str_cat(who, ": epoll_create1: ", std::strerror(errno)));
  for (int fd : {worker_fd, w->wake_->fd()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(w->epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(str_cat(who, ": epoll_ctl: ", std::strerror(errno)));
    }
  }
  return w;
}

UcxWorker::~UcxWorker() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

absl::StatusOr<ucp_mem_h> UcxWorker::map(const MemoryRegion& region) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = region.base;
  params.length = region.bytes;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context_, &params, &memh);
  if (st != UCS_OK) {
    return ucs_to_status(st, str_cat(who_, ": ucp_mem_map of pool ", region.name, " (", region.bytes, " bytes)"));
  }
  return memh;
}

absl::StatusOr<ucp_mem_h> UcxWorker::allocate(std::size_t bytes, std::string_view name, void** base) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context_, &params, &memh);
  if (st != UCS_OK) {
    return ucs_to_status(st, str_cat(who_, ": allocating pool ", name, " (", bytes, " bytes) with ucp_mem_map"));
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  st = ucp_mem_query(memh, &attr);
  if (st != UCS_OK || attr.length < bytes) {
    unmap(memh);
    return st != UCS_OK ? ucs_to_status(st, str_cat(who_, ": ucp_mem_query of pool ", name))
                        : absl::InternalError(str_cat(who_, ": pool ", name, " got ", attr.length, " bytes of ", bytes));
  }
  *base = attr.address;
  return memh;
}

void UcxWorker::unmap(ucp_mem_h memh) {
  ucs_status_t st = ucp_mem_unmap(context_, memh);
  if (st != UCS_OK) spdlog::warn("{}: ucp_mem_unmap: {}", who_, ucs_status_string(st));
}

absl::StatusOr<std::string> UcxWorker::address() const {
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  ucs_status_t st = ucp_worker_get_address(worker_, &addr, &len);
  if (st != UCS_OK) return ucs_to_status(st, str_cat(who_, ": ucp_worker_get_address"));
  std::string out(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(worker_, addr);
  return out;
}

void UcxWorker::progress() {
  while (ucp_worker_progress(worker_) != 0) {
  }
  if (other_ != nullptr) other_->progress();
}

absl::Status UcxWorker::drive_also(UcxWorker* other) {
  int fd = -1;
  ucs_status_t st = ucp_worker_get_efd(other->worker_, &fd);
  if (st != UCS_OK) return ucs_to_status(st, str_cat(who_, ": ucp_worker_get_efd"));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::InternalError(str_cat(who_, ": epoll_ctl: ", std::strerror(errno)));
  }
  other_ = other;
  return absl::OkStatus();
}

void UcxWorker::wait(std::optional<Deadline> until) {
  ucs_status_t st = ucp_worker_arm(worker_);
  if (st == UCS_ERR_BUSY) return;  // events arrived meanwhile: progress first
  if (st == UCS_OK && other_ != nullptr) {
    st = ucp_worker_arm(other_->worker_);
    if (st == UCS_ERR_BUSY) return;
  }
  if (st != UCS_OK) {
    // Not expected with UCP_FEATURE_WAKEUP; sleeping without an armed fd could miss events, so
    // fall back to a short bounded wait rather than an unbounded one.
    if (!arm_failed_) spdlog::warn("{}: ucp_worker_arm: {}; polling every millisecond", who_, ucs_status_string(st));
    arm_failed_ = true;
    until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  }
  int timeout_ms = -1;
  if (until) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*until - std::chrono::steady_clock::now());
    timeout_ms = static_cast<int>(std::max<std::int64_t>(0, left.count()));
  }
  epoll_event events[3];
  int n = epoll_wait(epoll_fd_, events, 3, timeout_ms);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == wake_->fd()) wake_->drain();
  }
}

}  // namespace baton::kv
