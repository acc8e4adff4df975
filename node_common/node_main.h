// What every server binary's main() does around its service: termination signals (SIGINT,
// SIGTERM) blocked in all threads and awaited in main, the "ready" line on stdout that `baton up`
// and scripts wait for, and a graceful drain for Kubernetes' termination: at the signal the node
// reports NOT_SERVING on grpc.health.v1 at once (the router's poll and the readiness probe take it
// out), refuses new work with UNAVAILABLE ("... node is draining", common/draining.h), lets the
// running requests finish and stops as soon as none is left, or when the drain timeout runs out,
// cancelling what is left with an error that says so. Then the server, then the service's engine.
//
// Must not: exit the process itself (main returns its code).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace baton {

// Call first in main(), before any thread starts, so every thread inherits the blocked mask.
void block_termination_signals();

// Prints "<binary> ready on <address> (<details>)" on stdout and flushes.
void announce_ready(const std::string& binary, const std::string& address, const std::string& details);

// A service whose requests can be drained. Thread-safety: called from main's thread while gRPC
// threads serve.
class DrainableService {
 public:
  virtual ~DrainableService() = default;
  // From now on, work that starts a request is refused with UNAVAILABLE and a message containing
  // kNodeDrainingPhrase; work that belongs to a running request is still done.
  virtual void start_draining() = 0;
  // The requests that have not ended yet.
  virtual std::size_t running_requests() = 0;
  // At the drain deadline: ends every running request with `reason` (an error for its caller).
  virtual void cancel_running(const std::string& reason) = 0;
};

// Waits for SIGINT or SIGTERM, then drains `service` (may be null: then the server alone gets
// `drain_timeout` to finish its calls): NOT_SERVING, start_draining(), running_requests() polled
// every 10 ms until 0 or `drain_timeout`, cancel_running() at the deadline; then server shutdown
// (1 s for calls in flight, such as health checks), then `stop_service`. Logs "draining" with the
// count at the start and "drained" or what it cancelled at the end.
void serve_until_signal(grpc::Server& server, DrainableService* service, std::chrono::milliseconds drain_timeout,
                        const std::function<void()>& stop_service);

}  // namespace baton

namespace baton {

// Announces this node to a router's Registry (`--register-with ROUTER`), waiting for the router
// to be reachable up to `timeout`. The router then polls the node like one given on its command
// line. Errors name the router.
absl::Status register_with_router(const std::string& router_address, const std::string& node_address,
                                  const std::string& role, std::chrono::milliseconds timeout);

}  // namespace baton
