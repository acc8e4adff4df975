// NcclKvLinkFactory and NcclKvLink (nccl_kv_link.h). NCCL is reached through a table of function
// pointers filled by dlsym; its header gives the types only.
// Must not: make an NCCL call on a communicator while another thread is in one (mu_); report a
// when_done before the stream has passed it.
#include "kv_transfer/nccl_kv_link.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace baton::kv {
namespace {

struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*comm_abort)(ncclComm_t);
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  const char* (*get_error_string)(ncclResult_t);
  const char* (*get_last_error)(ncclComm_t);
};

absl::StatusOr<const NcclApi*> load_nccl() {
  static std::mutex mu;
  static const NcclApi* api = nullptr;
  static std::string error;
  std::lock_guard lock(mu);
  if (api != nullptr) return api;
  if (!error.empty()) return absl::FailedPreconditionError(error);
  constexpr const char* kSoname = "libnccl.so.2";
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    error = str_cat("NCCL KV link: cannot load ", kSoname, ": ", dlerror());
    return absl::FailedPreconditionError(error);
  }
  static NcclApi loaded;
  bool ok = true;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr && ok) {
      ok = false;
      error = str_cat("NCCL KV link: ", kSoname, " has no ", name);
    }
  };
  bind(loaded.get_unique_id, "ncclGetUniqueId");
  bind(loaded.comm_init_rank_config, "ncclCommInitRankConfig");
  bind(loaded.comm_get_async_error, "ncclCommGetAsyncError");
  bind(loaded.comm_abort, "ncclCommAbort");
  bind(loaded.send, "ncclSend");
  bind(loaded.recv, "ncclRecv");
  bind(loaded.group_start, "ncclGroupStart");
  bind(loaded.group_end, "ncclGroupEnd");
  bind(loaded.get_error_string, "ncclGetErrorString");
  bind(loaded.get_last_error, "ncclGetLastError");
  if (!ok) return absl::FailedPreconditionError(error);
  api = &loaded;
  return api;
}

absl::Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(str_cat("NCCL KV link: ", what, ": ", cudaGetErrorString(e)));
}

absl::Status nccl_status(const NcclApi& api, ncclComm_t comm, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  const char* detail = api.get_last_error(comm);
  return absl::UnavailableError(str_cat("NCCL KV link: ", what, ": ", api.get_error_string(r),
                                        detail != nullptr && *detail != '\0' ? str_cat(" (", detail, ")") : ""));
}

// How often a non-blocking NCCL call's state is polled while it is in progress (set-up only:
// NCCL's non-blocking API has no other way to learn that it has finished).
constexpr auto kPollInterval = std::chrono::microseconds(200);

class NcclKvLink final : public KvLink {
 public:
  NcclKvLink(const NcclApi& api, ncclComm_t comm, int rank, int device, std::uint64_t max_piece)
      : api_(api), comm_(comm), peer_(1 - rank), device_(device), max_piece_(max_piece) {}

  absl::Status init() {
    BATON_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    BATON_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    if (peer_ == 0) {
      // The receiver's discard buffer, made now: cudaMalloc synchronizes the device, which must not
      // happen while the engine's steps run.
      BATON_RETURN_IF_ERROR(cuda_status(cudaMalloc(&discard_, max_piece_), "cudaMalloc (discard buffer)"));
    }
    notifier_ = std::thread([this] { notify_loop(); });
    return absl::OkStatus();
  }

  ~NcclKvLink() override {
    abort();
    if (stream_ != nullptr) {
      // The aborted communicator's kernels have returned: the stream drains and runs every host
      // function, so that each when_done reports before the notifier stops.
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    {
      std::lock_guard lock(done_mu_);
      stopping_ = true;
    }
    done_cv_.notify_all();
    if (notifier_.joinable()) notifier_.join();
    if (discard_ != nullptr) cudaFree(discard_);
  }

  absl::Status post_sends(std::span<const LinkPiece> pieces) override { return post(pieces, /*send=*/true); }
  absl::Status post_receives(std::span<const LinkPiece> pieces) override { return post(pieces, /*send=*/false); }

  void when_done(DoneCallback done) override {
    auto* node = new Completion{this, std::move(done)};
    std::lock_guard lock(mu_);
    cudaError_t e = aborted_ ? cudaErrorUnknown : cudaLaunchHostFunc(stream_, &NcclKvLink::on_stream, node);
    if (e != cudaSuccess) on_stream(node);  // reports the link's state (aborted or broken) at once
  }

  void abort() override {
    aborting_ = true;
    std::lock_guard lock(mu_);  // a post in progress sees aborting_ and returns soon
    if (!aborted_) {
      aborted_ = true;
      api_.comm_abort(comm_);
    }
  }

 private:
  struct Completion {
    NcclKvLink* link;
    DoneCallback done;
  };

  // Runs on CUDA's thread: no CUDA calls here, only a hand-off to the notifier.
  static void CUDART_CB on_stream(void* data) {
    auto* node = static_cast<Completion*>(data);
    NcclKvLink* link = node->link;
    {
      std::lock_guard lock(link->done_mu_);
      link->completed_.push_back(node);
    }
    link->done_cv_.notify_all();
  }

  void notify_loop() {
    std::unique_lock lock(done_mu_);
    for (;;) {
      done_cv_.wait(lock, [&] { return stopping_ || !completed_.empty(); });
      if (completed_.empty()) return;
      Completion* node = completed_.front();
      completed_.pop_front();
      lock.unlock();
      node->done(state());
      delete node;
      lock.lock();
    }
  }

  absl::Status state() {
    std::lock_guard lock(mu_);  // abort() frees the communicator
    if (aborting_ || aborted_) return absl::CancelledError("NCCL KV link: aborted");
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = api_.comm_get_async_error(comm_, &async);
    if (r != ncclSuccess) return nccl_status(api_, comm_, r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) return nccl_status(api_, comm_, async, "the communicator failed");
    return absl::OkStatus();
  }

  absl::Status post(std::span<const LinkPiece> pieces, bool send) {
    std::lock_guard lock(mu_);
    if (aborted_ || aborting_) return absl::CancelledError("NCCL KV link: aborted");
    BATON_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    ncclResult_t r = api_.group_start();
    for (const LinkPiece& p : pieces) {
      if (r != ncclSuccess) break;
      r = send ? api_.send(p.address, p.bytes, ncclUint8, peer_, comm_, stream_)
               : api_.recv(p.address != nullptr ? p.address : discard_, p.bytes, ncclUint8, peer_, comm_, stream_);
    }
    const ncclResult_t end = api_.group_end();
    if (r == ncclSuccess) r = end;
    // Non-blocking: the group may still be being enqueued (e.g. the first operation between the
    // ranks connects them, which needs the peer's matching one; ours announced it first).
    while (r == ncclInProgress) {
      if (aborting_) return absl::CancelledError("NCCL KV link: aborted");
      std::this_thread::sleep_for(kPollInterval);
      ncclResult_t async = ncclSuccess;
      r = api_.comm_get_async_error(comm_, &async);
      if (r == ncclSuccess) r = async;
    }
    return nccl_status(api_, comm_, r, send ? "ncclSend" : "ncclRecv");
  }

  const NcclApi& api_;
  const ncclComm_t comm_;
  const int peer_;
  const int device_;
  const std::uint64_t max_piece_;
  cudaStream_t stream_ = nullptr;
  void* discard_ = nullptr;

  std::mutex mu_;  // NCCL calls on comm_, and stream_ launches
  std::atomic<bool> aborting_{false};
  bool aborted_ = false;  // comm_abort has run

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::deque<Completion*> completed_;
  bool stopping_ = false;
  std::thread notifier_;
};

class NcclKvLinkFactory final : public KvLinkFactory {
 public:
  NcclKvLinkFactory(const NcclApi& api, NcclLinkOptions options) : api_(api), options_(options) {}

  std::string_view kind() const override { return "nccl"; }
  std::uint64_t max_piece_bytes() const override { return options_.max_piece_bytes; }

  absl::StatusOr<std::string> new_link_id() override {
    ncclUniqueId id;
    BATON_RETURN_IF_ERROR(nccl_status(api_, nullptr, api_.get_unique_id(&id), "ncclGetUniqueId"));
    return std::string(id.internal, sizeof(id.internal));
  }

  absl::StatusOr<std::unique_ptr<KvLink>> join(const std::string& link_id, int rank, Deadline deadline,
                                               const std::function<bool()>& give_up) override {
    ncclUniqueId id;
    if (link_id.size() != sizeof(id.internal)) {
      return absl::InvalidArgumentError(
          str_cat("NCCL KV link: the link id has ", link_id.size(), " bytes, an ncclUniqueId ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, link_id.data(), sizeof(id.internal));
    BATON_RETURN_IF_ERROR(cuda_status(cudaSetDevice(options_.device), "cudaSetDevice"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t r = api_.comm_init_rank_config(&comm, 2, id, rank, &config);
    while (r == ncclInProgress) {
      const bool gave_up = give_up();
      if (gave_up || std::chrono::steady_clock::now() >= deadline) {
        api_.comm_abort(comm);
        return gave_up ? absl::CancelledError("NCCL KV link: the peer will not join")
                       : absl::DeadlineExceededError("NCCL KV link: the peer did not join the communicator in time");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclResult_t async = ncclSuccess;
      r = api_.comm_get_async_error(comm, &async);
      if (r == ncclSuccess) r = async;
    }
    if (r != ncclSuccess) {
      absl::Status s = nccl_status(api_, comm, r, "ncclCommInitRankConfig");
      if (comm != nullptr) api_.comm_abort(comm);
      return s;
    }
    auto link = std::make_unique<NcclKvLink>(api_, comm, rank, options_.device, options_.max_piece_bytes);
    BATON_RETURN_IF_ERROR(link->init());
    return std::unique_ptr<KvLink>(std::move(link));
  }

 private:
  const NcclApi& api_;
  NcclLinkOptions options_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<KvLinkFactory>> make_nccl_link_factory(NcclLinkOptions options) {
  if (options.max_piece_bytes == 0 || options.device < 0) {
    return absl::InvalidArgumentError(str_cat("NCCL KV link: max_piece_bytes must be positive and device >= 0 (got ",
                                              options.max_piece_bytes, ", ", options.device, ")"));
  }
  BATON_ASSIGN_OR_RETURN(const NcclApi* api, load_nccl());
  return std::shared_ptr<KvLinkFactory>(std::make_shared<NcclKvLinkFactory>(*api, options));
}

}  // namespace baton::kv
