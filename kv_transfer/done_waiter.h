// DoneWaiter: collects a KvTransfer's done status (transport.h's DoneCallback) for a caller that
// waits for it by a deadline. The callback holds shared state, so it may run after the waiter's
// owner gave up waiting and is gone.
//
// Must not: wait without a deadline.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/status/status.h"
#include "kv_transfer/transport.h"

namespace baton::kv {

class DoneWaiter {
 public:
  DoneCallback callback() {
    auto s = state_;
    return [s](absl::Status status) {
      std::lock_guard lock(s->mu);
      ++s->calls;
      s->status = std::move(status);
      s->cv.notify_all();
    };
  }
  // nullopt when nothing came by `until`.
  std::optional<absl::Status> wait_until(Deadline until) {
    std::unique_lock lock(state_->mu);
    state_->cv.wait_until(lock, until, [&] { return state_->status.has_value(); });
    return state_->status;
  }
  // How many times the callback ran (a transport must run it once).
  int calls() const {
    std::lock_guard lock(state_->mu);
    return state_->calls;
  }

 private:
  struct State {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::optional<absl::Status> status;
    int calls = 0;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace baton::kv
