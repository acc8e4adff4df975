// What the UCX sender's transport thread keeps per transfer, and the queue through which callers
// hand it work (ucx_sender.cc). Internal to kv_transfer.
//
// Ownership: TransferState fields marked "thread" are touched only by the transport thread;
// callers only create a TransferState and hand it over through the CommandQueue.
// Must not: block in CommandQueue::push (one short mutex hold, no network wait).
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "common/status.h"
#include "kv_transfer/transport.h"
#include "kv_transfer/ucx_descriptor.h"
#include "kv_transfer/ucx_peer_cache.h"
#include "kv_transfer/ucx_transport.h"
#include "kv_transfer/ucx_worker.h"

namespace baton::kv {

// One request's writes. Lives in the loop's active set from connect until it has reported and
// nothing of it is in flight; the caller's KvTransfer handle shares it.
struct TransferState {
  std::string request_id;
  std::string address;
  UcxKvSender::Loop* loop = nullptr;
  std::atomic<bool> connect_taken{false};  // the thread has taken its ConnectCmd (for diagnostics)
  std::atomic<bool> shm_path{false};       // connected through the shared-memory worker
  // thread:
  std::shared_ptr<Peer> peer;
  absl::Status error;           // the first failure; later puts are dropped
  std::int64_t in_flight = 0;   // puts posted and not completed
  std::size_t copies_put = 0;   // copies accepted so far (numbers copies in messages)
  bool flush_pending = false;
  bool finishing = false;       // finish() arrived
  bool reported = false;        // `done` handed out (or there was none)
  Deadline deadline{};
  DoneCallback done;

  std::string where() const { return str_cat("ucx transfer of request ", request_id, " to ", address); }
};

struct ConnectCmd {
  std::shared_ptr<TransferState> transfer;
  UcxDescriptor descriptor;
  std::uint64_t instance = 0;
  std::shared_ptr<std::promise<absl::Status>> result;
};
struct PutCmd {
  std::shared_ptr<TransferState> transfer;
  std::int32_t pool = 0;
  std::vector<Copy> copies;
};
struct FinishCmd {
  std::shared_ptr<TransferState> transfer;
  Deadline deadline{};
  DoneCallback done;  // empty: the handle was dropped without finish()
};
struct InvalidateCmd {
  std::string address;
};
using Command = std::variant<ConnectCmd, PutCmd, FinishCmd, InvalidateCmd>;

// Callers -> transport thread. Shared with the transfer handles so that a handle outliving its
// sender finds it closed instead of dangling. One wake-up per batch: `signaled_` is set by the push
// that finds the batch empty of signals and cleared by take() under the same lock, so a push after
// a take always signals again (a flag outside the lock could be left set by a signal whose write
// the waiter had already consumed, and every later wake-up would be skipped).
class CommandQueue {
 public:
  explicit CommandQueue(std::shared_ptr<WakeFd> wake) : wake_(std::move(wake)) {}

  // Moves `cmd` in and wakes the thread; false (cmd untouched) once closed.
  bool push(Command& cmd) {
    bool signal = false;
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      pending_.push_back(std::move(cmd));
      signal = !signaled_;
      signaled_ = true;
    }
    if (signal) wake_->signal();
    return true;
  }
  std::vector<Command> take() {
    std::vector<Command> out;
    std::lock_guard lock(mu_);
    out.swap(pending_);
    signaled_ = false;
    return out;
  }
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }

 private:
  std::shared_ptr<WakeFd> wake_;
  std::mutex mu_;
  std::vector<Command> pending_;
  bool signaled_ = false;
  bool closed_ = false;
};

}  // namespace baton::kv
