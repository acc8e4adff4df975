#include "node_common/node_main.h"

#include <csignal>
#include <cstdio>
#include <thread>

#include "baton/v1/node.grpc.pb.h"
#include "common/status.h"
#include "node_common/grpc_server.h"
#include "security/grpc_credentials.h"
#include "spdlog/spdlog.h"

namespace baton {

namespace {
sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void block_termination_signals() {
  const sigset_t set = termination_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void announce_ready(const std::string& binary, const std::string& address, const std::string& details) {
  std::printf("%s ready on %s (%s)\n", binary.c_str(), address.c_str(), details.c_str());
  std::fflush(stdout);
}

void serve_until_signal(grpc::Server& server, DrainableService* service, std::chrono::milliseconds drain_timeout,
                        const std::function<void()>& stop_service) {
  const sigset_t set = termination_signals();
  int sig = 0;
  sigwait(&set, &sig);
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + drain_timeout;
  set_serving(server, false);
  if (service == nullptr) {
    spdlog::info("{}: NOT_SERVING, stopping (calls in flight get {} ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 drain_timeout.count());
    server.Shutdown(std::chrono::system_clock::now() + drain_timeout);
    stop_service();
    return;
  }
  service->start_draining();
  spdlog::info("{}: draining: NOT_SERVING, new requests refused, {} request(s) running (--drain-timeout-ms {})",
               sig == SIGINT ? "SIGINT" : "SIGTERM", service->running_requests(), drain_timeout.count());
  // Requests end on engine and gRPC threads; a 10 ms poll keeps this free of their locks.
  std::size_t running = service->running_requests();
  while (running > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    running = service->running_requests();
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  if (running == 0) {
    spdlog::info("drained in {} ms: no request is running", took.count());
  } else {
    spdlog::warn("--drain-timeout-ms ({} ms) ran out with {} request(s) running: cancelling them", drain_timeout.count(),
                 running);
    service->cancel_running(str_cat("the node is shutting down: its --drain-timeout-ms (", drain_timeout.count(),
                                    " ms) ran out before the request finished"));
  }
  server.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  stop_service();
}

absl::Status register_with_router(const std::string& router_address, const std::string& node_address,
                                  const std::string& role, std::chrono::milliseconds timeout) {
  auto stub = node::v1::Registry::NewStub(grpc::CreateChannel(router_address, security::cluster_channel_credentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  ctx.set_wait_for_ready(true);  // the router may still be starting
  node::v1::RegisterNodeRequest request;
  request.set_address(node_address);
  request.set_role(role);
  node::v1::RegisterNodeResponse response;
  const grpc::Status s = stub->RegisterNode(&ctx, request, &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        str_cat("registering with the router at ", router_address, ": ", s.error_message()));
  }
  spdlog::info("registered with the router at {} as a {} node", router_address, role);
  return absl::OkStatus();
}

}  // namespace baton
