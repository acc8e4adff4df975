// The requests this router is running, by request id: unique ids for requests that come without
// one, the Abort RPC's way to a running request, and each request's cancellation (RequestControl),
// which wakes the node calls it has in flight.
//
// Thread-safety: every method may be called from any thread. Must not: call nodes (the request's
// own thread sends node aborts, once per node).
#pragma once

#include <atomic>
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

 private:
  std::string new_id();

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<RequestControl>> running_;
  const std::size_t max_running_;
  std::string prefix_;  // random per process, so ids do not repeat across router restarts
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace baton::router
