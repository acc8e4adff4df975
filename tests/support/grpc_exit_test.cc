// proto/grpc_exit.h on real gRPC: the wait runs out while a channel lives, and ends once the last
// channel is gone and gRPC has finished shutting down on its own threads. This process runs one
// test case alone, so nothing else keeps gRPC running.
#include "proto/grpc_exit.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(GrpcExit, WaitsUntilTheLastChannelIsTornDown) {
  ASSERT_TRUE(wait_for_grpc_shutdown(std::chrono::milliseconds(0)));  // not started yet
  {
    // Nothing listens on port 1: the channel tries, fails and backs off, as one to a node that
    // went away does.
    auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
    EXPECT_FALSE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(200)));
    EXPECT_FALSE(wait_for_grpc_shutdown(std::chrono::milliseconds(50)));
  }
  EXPECT_TRUE(wait_for_grpc_shutdown(std::chrono::seconds(10)));
  EXPECT_FALSE(grpc_is_initialized());
}

}  // namespace
}  // namespace baton
