#include "node_common/node_main.h"

#include <csignal>
#include <cstdio>

#include "baton/v1/node.grpc.pb.h"
#include "common/status.h"
#include "node_common/grpc_server.h"
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

void serve_until_signal(grpc::Server& server, const std::function<void()>& stop_service, std::chrono::milliseconds drain) {
  const sigset_t set = termination_signals();
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("signal {}: stopping", sig);
  set_serving(server, false);
  server.Shutdown(std::chrono::system_clock::now() + drain);
  stop_service();
}

absl::Status register_with_router(const std::string& router_address, const std::string& node_address,
                                  const std::string& role, std::chrono::milliseconds timeout) {
  auto stub = node::v1::Registry::NewStub(grpc::CreateChannel(router_address, grpc::InsecureChannelCredentials()));
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
