// The requests this router is running, by request id: unique ids for requests that come without
// one, the Abort RPC's way to a running request, and each request's cancellation (RequestControl),
// which wakes the node calls it has in flight. While the router drains (SIGTERM) it refuses new
// requests and lets main() wait, with a deadline, for the running ones to end.
//
// Thread-safety: every method may be called from any thread. Must not: call nodes (the request's
// own thread sends node aborts, once per node).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"

namespace baton::router {

class RequestControl {
 public:
  // Cancels the calls in flight and every call registered later. The first reason sticks.
  void cancel(const std::string& reason);
  bool cancelled() const;
  std::string reason() const;

  // Registers a node call for the scope's lifetime so that cancel() can TryCancel it; cancels it at
  // once when the request is cancelled already.
  class CallScope {
   public:
    CallScope(RequestControl& control, grpc::ClientContext& context);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    RequestControl& control_;
    grpc::ClientContext& context_;
  };

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::string reason_;
  std::set<grpc::ClientContext*> calls_;
};

class RunningRequests {
 public:
  // max_running: the most requests at once (0: no limit).
  explicit RunningRequests(std::size_t max_running = 0);
  // Registers a request; assigns `request_id` when empty. ALREADY_EXISTS when that id is running,
  // INVALID_ARGUMENT when it is too long, RESOURCE_EXHAUSTED when max_running are running.
  absl::StatusOr<std::shared_ptr<RequestControl>> add(std::string& request_id);
  void remove(const std::string& request_id);
  // The Abort RPC: false when no request with that id is running.
  bool cancel(const std::string& request_id, const std::string& reason);
  std::size_t size() const;

  // From now on add() is UNAVAILABLE with `reason` (the router is draining).
  void refuse_new(const std::string& reason);
  // Waits until no request runs; false at the deadline.
  bool wait_until_empty(std::chrono::steady_clock::time_point deadline) const;
  // Cancels every running request with `reason`; returns how many.
  std::size_t cancel_all(const std::string& reason);

 private:
  std::string new_id();

  mutable std::mutex mu_;
  mutable std::condition_variable emptied_;
  std::string refusal_;  // non-empty: refuse new requests with it
  std::map<std::string, std::shared_ptr<RequestControl>> running_;
  const std::size_t max_running_;
  std::string prefix_;  // random per process, so ids do not repeat across router restarts
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace baton::router
