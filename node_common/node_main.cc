#include "node_common/node_main.h"

#include <csignal>
#include <cstdio>

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

}  // namespace baton
