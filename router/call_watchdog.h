// CallWatchdog: ends node calls that stopped making progress, so that a stopped (SIGSTOP), wedged
// or partitioned node costs its requests seconds, not the minutes of their deadlines.
//
// A request registers each long node call (the Decode stream it forwards, the Prefill it waits
// for) as a Watch with its node. One thread checks every watch each `tick` and TryCancels the
// call when
//   - no progress came within its allowance: progress() restarts the clock (each message of a
//     Decode stream); the first allowance may be longer (a local prefill before the first token);
//   - its node failed `unreachable_polls` health polls in a row since the call began (the pool's
//     Check went unanswered: the node is gone or frozen, not merely busy or draining).
// The call then ends CANCELLED on the caller's thread, which asks why() and fails the attempt with
// that reason (the request is retried elsewhere when no token reached the client yet).
//
// Thread-safety: Watch methods on the request's thread; the watchdog's thread only reads the
// watch's clock and flags and cancels its context. Must not: block on a call, or outlive the
// contexts it watches (a Watch unregisters in its destructor, before its context goes).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "grpcpp/client_context.h"
#include "router/node_pool.h"

namespace baton::router {

struct CallWatchdogOptions {
  std::chrono::milliseconds tick{100};
  // Consecutive unanswered health polls of a node that end its calls; 0: never.
  int unreachable_polls = 2;
};

class CallWatchdog {
 public:
  explicit CallWatchdog(CallWatchdogOptions options = {});
  ~CallWatchdog();
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  class Watch {
   public:
    // `first_allowance` until the first progress(), then `allowance` after each; zero: no limit.
    Watch(CallWatchdog& dog, const Node& node, grpc::ClientContext& context, std::chrono::milliseconds first_allowance,
          std::chrono::milliseconds allowance);
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

    void progress();
    enum class Reason { kNone, kNoProgress, kNodeUnreachable };
    // Whether the watchdog cancelled the call, and why (kNone / "" when it did not).
    bool fired() const { return fired_.load(std::memory_order_acquire); }
    Reason reason() const { return fired() ? reason_ : Reason::kNone; }
    std::string why() const;

   private:
    friend class CallWatchdog;
    // Called with the watchdog's lock held.
    void check(Clock::time_point now, int unreachable_polls);

    CallWatchdog& dog_;
    const Node& node_;
    grpc::ClientContext& context_;
    const std::chrono::milliseconds allowance_;
    std::atomic<std::int64_t> window_ms_;  // the allowance now running (first, then allowance_)
    const std::uint64_t unreachable_at_start_;
    std::atomic<Clock::rep> due_;  // Clock ticks; max: no progress limit
    Reason reason_ = Reason::kNone;  // written before fired_ is set
    std::atomic<bool> fired_{false};
    mutable std::mutex why_mu_;
    std::string why_;
  };

  // Watches registered now (for tests).
  std::size_t watching() const;

 private:
  void run();

  const CallWatchdogOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<Watch*> watches_;
  std::thread thread_;
};

}  // namespace baton::router
