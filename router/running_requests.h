// The requests this router is running, each owned by the caller that started it (its API key's
// id; "" without keys): ids for requests that come without one (128 random bits, so that nobody
// can guess another's), the Abort RPC's way to a running request (only its owner's), each
// request's cancellation (RequestControl), which wakes the node calls it has in flight, and the
// limits on how many run at once, in all and per key. While the router drains (SIGTERM) it
// refuses new requests and lets main() wait, with a deadline, for the running ones to end.
//
// Admission: a request that finds no room (the total or its key's share is taken) waits in a
// bounded queue for at most `queue_timeout`; a freed slot goes to the waiter whose key runs the
// fewest requests (the earliest among equals), so one busy key cannot starve the others. With the
// queue full, or after its wait, a request is RESOURCE_EXHAUSTED (429 on HTTP) saying which.
//
// A request has two ids: the client's (chosen by the client or drawn here; what responses carry
// and Abort names, unique per owner) and the node id node calls and logs use: the drawn id itself,
// or a client's own id with "~" and 16 random hex digits, so that two callers' ids never meet on
// a node (and operators still find the client's id in the nodes' logs).
//
// The queue is asynchronous at its core (add_async: a callback, called once, with the registered
// request or the refusal; a thread of its own ends waits at their deadline); add() waits on it for
// callers that have a thread to block.
//
// Thread-safety: every method may be called from any thread; callbacks run without the lock held.
// Must not: call nodes (the request's own path sends node aborts, once per node).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"

namespace baton::router {

class RequestControl {
 public:
  // Cancels the calls in flight and every call registered later. The first reason sticks.
  void cancel(const std::string& reason);
  // The client went away (its call cancelled, its connection closed): cancel() that says so, so
  // the request ends as cancelled rather than aborted (when nothing cancelled it before).
  void client_left(const std::string& reason);
  bool cancelled() const;
  bool left() const;  // cancelled by client_left()
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
  bool client_left_ = false;
  std::string reason_;
  std::set<grpc::ClientContext*> calls_;
};

struct RunningLimits {
  std::size_t max_running = 0;    // requests at once, all callers (0: no limit)
  std::size_t max_per_owner = 0;  // requests at once per API key (0: no limit; no effect without keys)
  std::size_t max_queued = 0;     // requests waiting for room at once (0: none wait, refused at once)
  std::chrono::milliseconds queue_timeout{30000};  // the longest one waits
};

// Admission since start, for metrics.
struct AdmissionCounts {
  std::int64_t admitted = 0;         // registered (at once or after a wait)
  std::int64_t admitted_after_wait = 0;
  std::int64_t queue_full = 0;       // refused: no room and the queue full (or no queue)
  std::int64_t queue_timeout = 0;    // refused: waited queue_timeout
  std::int64_t left_queue = 0;       // the client went away, or the router drained, while it waited
};

// A registered request (RunningRequests::add).
struct RunningRequest {
  std::shared_ptr<RequestControl> control;
  std::string client_id;
  std::string node_id;
};

// A client's request_id: at most 256 characters, printable ASCII only (it reaches logs and node
// calls). INVALID_ARGUMENT naming the field otherwise.
absl::Status check_request_id(const std::string& request_id);

// What add_async() hands the request to, once: the registered request or the refusal.
using AdmissionCallback = std::function<void(absl::StatusOr<RunningRequest>)>;

class RunningRequests {
 public:
  explicit RunningRequests(RunningLimits limits = {});
  ~RunningRequests();
  RunningRequests(const RunningRequests&) = delete;
  RunningRequests& operator=(const RunningRequests&) = delete;
  // Registers a request of `owner`, waiting in the queue for room if there is none. `client_id`
  // "" : one is drawn ("req-" and 32 hex digits). `gone`, if given, is asked while the request
  // waits (every 50 ms): true ends the wait with CANCELLED (the client hung up). INVALID_ARGUMENT
  // for a malformed id, ALREADY_EXISTS when the owner runs that id already, RESOURCE_EXHAUSTED
  // with the queue full or after queue_timeout, UNAVAILABLE while draining.
  absl::StatusOr<RunningRequest> add(const std::string& owner, std::string client_id,
                                     const std::function<bool()>& gone = nullptr);
  // add() without blocking: `done` gets what add() returns, exactly once — at once (on this
  // thread) when there is room or no wait is possible, else later from the thread that frees a
  // slot, the queue's deadline thread, or whichever calls leave_queue() or refuse_new(). Returns
  // the wait's ticket for leave_queue(), or 0 when `done` was called already.
  std::uint64_t add_async(const std::string& owner, std::string client_id, AdmissionCallback done);
  // The client of a waiting request went away: its callback gets CANCELLED. Nothing once it was
  // admitted or refused (the ticket is spent).
  void leave_queue(std::uint64_t ticket);
  void remove(const std::string& owner, const std::string& client_id);
  // The Abort RPC: false when `owner` runs no request with that id (another owner's is not found).
  bool cancel(const std::string& owner, const std::string& client_id, const std::string& reason);
  std::size_t size() const;
  std::size_t queued() const;
  AdmissionCounts counts() const;
  // The limits change (derived ones follow the nodes, admission_limits.h): more room admits
  // waiters at once; less refuses nothing already running, and new requests wait or are refused.
  void set_limits(const RunningLimits& limits);
  RunningLimits limits() const;

  // From now on add() is UNAVAILABLE with `reason` (the router is draining).
  void refuse_new(const std::string& reason);
  // Waits until no request runs; false at the deadline.
  bool wait_until_empty(std::chrono::steady_clock::time_point deadline) const;
  // Cancels every running request with `reason`; returns how many.
  std::size_t cancel_all(const std::string& reason);

 private:
  using Key = std::pair<std::string, std::string>;  // owner, client id
  struct Waiter {
    std::uint64_t ticket = 0;
    std::string owner;
    std::string client_id;
    std::chrono::steady_clock::time_point deadline;
    AdmissionCallback done;
  };
  // Callbacks to call once the lock is released, with what they get.
  using Deliveries = std::vector<std::pair<AdmissionCallback, absl::StatusOr<RunningRequest>>>;
  static void deliver(Deliveries& out);

  // mu_ held throughout:
  bool has_room(const std::string& owner) const;
  absl::Status duplicate(const std::string& owner, const std::string& client_id) const;
  RunningRequest register_locked(const std::string& owner, std::string client_id);
  void grant_waiters(Deliveries& out);  // gives free slots to waiters, fewest-running key first
  absl::Status full_refusal(const std::string& owner) const;
  void expire_waits();  // the deadline thread's loop

  mutable std::mutex mu_;
  mutable std::condition_variable emptied_;
  std::condition_variable deadlines_;  // the queue or the stop flag changed
  std::string refusal_;  // non-empty: refuse new requests with it
  std::map<Key, std::shared_ptr<RequestControl>> running_;
  std::map<std::string, std::size_t> per_owner_;  // running, by owner
  std::list<Waiter> queue_;                       // waiting, in arrival order
  std::uint64_t next_ticket_ = 1;
  bool stopping_ = false;
  AdmissionCounts counts_;
  RunningLimits limits_;
  std::thread deadline_thread_;  // last: started once the rest exists
};

}  // namespace baton::router
