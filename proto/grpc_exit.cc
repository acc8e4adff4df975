#include "proto/grpc_exit.h"

#include <grpc/grpc.h>

#include <cstdio>
#include <thread>

namespace baton {

bool wait_for_grpc_shutdown(std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  // grpc_is_initialized() holds gRPC's init lock, which its shutdown holds throughout: it turns
  // false only once the shutdown is complete. gRPC offers no notification, so this polls.
  while (grpc_is_initialized()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

int exit_after_grpc_shutdown(int exit_code) {
  if (!wait_for_grpc_shutdown()) {
    std::fprintf(stderr, "gRPC was still running 5 s after main() ended (a channel or server outlived it); exiting anyway\n");
  }
  return exit_code;
}

}  // namespace baton
