// main() of the test binaries that use gRPC: gtest's main, then a wait for gRPC to shut down (see
// proto/grpc_exit.h) so the process never exits while gRPC's threads still tear down what a test
// used. A test that leaves a channel or server alive makes that wait fail, and the binary with it.
#include <gtest/gtest.h>

#include <cstdio>

#include "proto/grpc_exit.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int code = RUN_ALL_TESTS();
  if (!baton::wait_for_grpc_shutdown()) {
    std::fprintf(stderr, "gRPC was still running 5 s after the tests ended: a test left a channel or server alive\n");
    return 1;
  }
  return code;
}
