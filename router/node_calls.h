// One request's calls to nodes, made the same way every time: each with a deadline (never past the
// request's own, nor the client's) and registered with the request's RequestControl, through which
// the Abort RPC and the client's going away (RequestControl::client_left, from the front end)
// cancel it. Cancellation is not propagated by gRPC from the client's call: it would race the
// front end's notice, and a cancelled node call must say why it ended; failures named
// after the node ("decode node 10.0.0.2:5001: ...", the node's code kept) and reported to the pool
// (UNAVAILABLE / DEADLINE_EXCEEDED mark the node unusable); best-effort Release and Abort with a
// short deadline, each sent at most once per node and node-call id (no abort storms), made
// asynchronously: the caller learns when each ended (a request is over only once they are).
//
// Thread-safety: one request's serial queue (request_flow.cc). Must not: decide what to call next
// (request_flow.h does), or block.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "router/node_pool.h"
#include "router/router_stats.h"
#include "router/running_requests.h"

namespace baton::router {

class NodeCalls {
 public:
  // server: the client's call, whose deadline node calls keep to; null without one (HTTP).
  NodeCalls(NodePool& pool, RouterStats& stats, RequestControl& control, const grpc::ServerContextBase* server,
            Clock::time_point request_deadline, std::chrono::milliseconds abort_timeout);

  // A context whose deadline is min(now + timeout, the request's deadline, the client's deadline).
  std::unique_ptr<grpc::ClientContext> context(std::chrono::milliseconds timeout) const;
  std::unique_ptr<grpc::ClientContext> context_until_request_deadline() const;

  // Why the request stopped, when it did: the Abort RPC, the client going away, or its deadline.
  bool aborted_by_rpc() const { return control_.cancelled() && !control_.left(); }
  // The client's own deadline counts as gone too: it propagates to the node calls, whose
  // DEADLINE_EXCEEDED may arrive before the server context shows the call cancelled (gRPC keeps
  // deadlines in milliseconds, hence the slack). Without this a client's short deadline marked the
  // node unusable for every other request.
  bool client_gone() const {
    return control_.left() || (server_ != nullptr && (server_->IsCancelled() || std::chrono::system_clock::now() +
                                                                                    std::chrono::milliseconds(10) >=
                                                                                server_->deadline()));
  }
  bool request_deadline_passed() const { return Clock::now() >= request_deadline_; }
  bool stopped() const { return aborted_by_rpc() || client_gone() || request_deadline_passed(); }

  // A failed call: reports it to the pool unless the request itself stopped (its deadline, the
  // client, an abort), and returns the status for the client with the node named.
  grpc::Status failed(const Node& node, const grpc::Status& status);

  // Best effort, short deadline, not tied to the client's call (which may be gone). `capability`:
  // the node-call's token (node.proto), without which the node refuses. Both return at once;
  // `ended` is called once, on a gRPC thread, when the call ended (however it did). abort() returns
  // false, and calls nothing, when it was sent to that node for that id already.
  void release(std::shared_ptr<Node> decode, const std::string& node_request_id, const std::string& capability,
               std::function<void()> ended);
  bool abort(std::shared_ptr<Node> node, const std::string& node_request_id, const std::string& capability,
             std::function<void()> ended);

  RequestControl& control() { return control_; }

 private:
  NodePool& pool_;
  RouterStats& stats_;
  RequestControl& control_;
  const grpc::ServerContextBase* server_;
  const Clock::time_point request_deadline_;
  const std::chrono::milliseconds abort_timeout_;
  std::set<std::string> aborted_;  // "address|id"
};

}  // namespace baton::router
