// What our cpp-httplib listeners (the router's OpenAI API, the nodes' /metrics) share:
//  - reuse_address_only: socket options with SO_REUSEADDR only. cpp-httplib's default adds
//    SO_REUSEPORT, which lets a second process bind a port that is in use and silently take a
//    share of its connections instead of failing to start.
//  - start_accept_loop: runs the accept loop of a bound server on a thread and returns once the
//    loop runs. cpp-httplib's stop() only reaches a server already in its loop, so stopping one
//    right after it started could otherwise leave the loop running and its thread unjoinable.
// Header-only; include it only from targets that link cpp-httplib. No routes, no policy.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "httplib.h"

namespace baton {

inline void reuse_address_only(socket_t sock) {
  int yes = 1;
  (void)setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// `server` must be bound (bind_to_port / bind_to_any_port). Waits at most 5 s for the loop.
inline std::thread start_accept_loop(httplib::Server& server) {
  std::thread t([&server] { server.listen_after_bind(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!server.is_running() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  return t;
}

}  // namespace baton
