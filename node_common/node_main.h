// What every server binary's main() does around its service: termination signals (SIGINT,
// SIGTERM) blocked in all threads and awaited in main, the "ready" line on stdout that `baton up`
// and scripts wait for, and an orderly stop (health NOT_SERVING, the server drained with a
// deadline, then the service's engine).
//
// Must not: exit the process itself (main returns its code).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace baton {

// Call first in main(), before any thread starts, so every thread inherits the blocked mask.
void block_termination_signals();

// Prints "<binary> ready on <address> (<details>)" on stdout and flushes.
void announce_ready(const std::string& binary, const std::string& address, const std::string& details);

// Waits for SIGINT or SIGTERM, then stops: NOT_SERVING, server shutdown with `drain` to finish
// calls in flight, then `stop_service`.
void serve_until_signal(grpc::Server& server, const std::function<void()>& stop_service,
                        std::chrono::milliseconds drain = std::chrono::milliseconds(2000));

}  // namespace baton

namespace baton {

// Announces this node to a router's Registry (`--register-with ROUTER`), waiting for the router
// to be reachable up to `timeout`. The router then polls the node like one given on its command
// line. Errors name the router.
absl::Status register_with_router(const std::string& router_address, const std::string& node_address,
                                  const std::string& role, std::chrono::milliseconds timeout);

}  // namespace baton
