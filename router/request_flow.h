// One request across the nodes (docs/architecture.md, "Life of a disaggregated request"): place it (node_pool.h),
// check its prompt against the decode node's limits, then either
//   disaggregated: D.Reserve -> KvDestination; D.Decode opened (D waits for the commit);
//                  P.Prefill(prompt, destination) -> the first token, written to the client at once;
//                  D's Decode stream forwarded message by message, the last one with usage; or
//   local:         D.Decode with the prompt (conditional disaggregation, forced, or no usable P).
// Node-call ids are "<request_id>.<attempt>", so a retried attempt never collides with a late
// message of a failed one. A failure before the first token reached the client is retried once
// (another P, or locally on D when none; another D when D failed); a draining node's refusal
// (UNAVAILABLE, common/draining.h) is retried elsewhere up to four times besides; INVALID_ARGUMENT and
// FAILED_PRECONDITION from P go to the client as they are. After the first token, errors reach the
// client with the node named. A decode stream that sends nothing for progress_timeout, and a call
// to a node that stops answering its health checks, end UNAVAILABLE (call_watchdog.h) and count as
// node failures (retried when no token reached the client). The Abort RPC ends the stream with
// FINISH_REASON_ABORT; a client
// that goes away, or the request deadline, cancels the node calls in flight and aborts the request
// on the nodes it reached (once per node).
//
// The machine, one request (RequestState, router_stats.h; each transition logged at debug level
// and counted in baton_router_request_state_entered_total):
//
//   received --(admission: router_service.cc)--> queued --> admitted      (or failed: refused)
//   admitted --> reserving --(D.Reserve ok; D.Decode opened)--> prefilling --(P.Prefill ok: first token
//                written)--> streaming --(D's last message written)--> finished
//   admitted --(local prefill: D.Decode with the prompt)--> streaming
//   reserving | prefilling | streaming --(a node failed before the client's first token)--> the
//                next attempt's reserving / streaming (placement again, the failed node left out)
//   any --(the Abort RPC)--> finished (an abort message); --(error, client gone, deadline)--> failed
//
// Driven by gRPC's callback API end to end: no thread waits for a request. Every event (a node
// call's answer, a message of D's stream, the client taking a message) is posted to the request's
// SerialQueue (common/serial_queue.h) and handled there, one at a time. Writes to the client go one
// at a time, and D's stream is read only once the previous message was taken, so a slow client
// slows its D stream (and the progress watchdog ends one that stalls), never a thread.
//
// Thread-safety: start() from any thread; any number run at once. Must not: encode prompts,
// register request ids (router_service.h does both), block, or keep state across requests
// beyond the pool and the counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "baton/v1/api.pb.h"
#include "grpcpp/server_context.h"
#include "router/call_watchdog.h"
#include "router/node_pool.h"
#include "router/router_stats.h"
#include "router/running_requests.h"

namespace baton::router {

struct FlowOptions {
  std::chrono::milliseconds node_timeout{5000};        // Reserve, Release, Info...
  std::chrono::milliseconds prefill_timeout{60000};    // one Prefill call
  std::chrono::milliseconds request_timeout{600000};   // the whole request
  std::chrono::milliseconds commit_timeout{60000};     // how long D waits for P's commit
  std::chrono::milliseconds abort_timeout{1000};       // best-effort Release / Abort
  std::chrono::milliseconds progress_timeout{30000};   // the longest gap in D's stream; 0: none
  std::int64_t local_prefill_max_tokens = 0;           // prompts this short prefill on D
  bool local_fallback = true;                          // prefill on D when no P can be used
  // Open D's Decode stream right after Reserve (node.proto's order: D then waits for the commit)
  // rather than after P returned the first token.
  bool open_decode_before_prefill = true;
};

// Where a request's messages go.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Sends one message and returns at once. `sent` is called once, on any thread (inline too): true
  // when the client took it (the next may follow), false when the client is gone. The flow has at
  // most one write outstanding.
  virtual void write(const baton::v1::GenerateResponse& response, std::function<void(bool sent)> sent) = 0;
};

// How a run ended; called once, after its last write and once every node call it made ended
// (Release and Abort included).
using FlowDone = std::function<void(grpc::Status)>;

class RequestFlow {
 public:
  RequestFlow(NodePool& pool, RouterStats& stats, CallWatchdog& watchdog, FlowOptions options)
      : pool_(pool), stats_(stats), watchdog_(watchdog), options_(options) {}

  // Starts one request whose prompt is encoded and whose id is registered (the admitted state), and
  // returns at once; `done` gets its status. server: the client's call (cancellation and deadline
  // propagate to node calls); null when driven without a server (the front end then cancels
  // `control` when its client goes away). received: when the router got the request (timings
  // start there). `client_id`: what responses carry; `node_id`: what node calls
  // ("<node_id>.<attempt>") and logs use; `cache_salt`: the prefix-cache salt the nodes get (the
  // caller's, RouterService::admit_async). Everything passed by reference must outlive `done`.
  void start(const baton::v1::GenerateRequest& request, const std::string& client_id, const std::string& node_id,
             std::uint64_t cache_salt, const std::vector<std::int32_t>& prompt, RequestControl& control,
             const grpc::ServerContextBase* server, ResponseSink& sink, Clock::time_point received,
             FlowDone done) const;

  const FlowOptions& options() const { return options_; }

 private:
  NodePool& pool_;
  RouterStats& stats_;
  CallWatchdog& watchdog_;
  const FlowOptions options_;
};

}  // namespace baton::router
