// RouterService::begin_drain / drain in-process (no nodes): the health service says NOT_SERVING
// for the Kubernetes probe ("" service) and baton.v1.Baton, new requests are refused with
// UNAVAILABLE saying the router drains, and drain() returns at once when nothing runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "router/router_service.h"
#include "router_client.h"

namespace baton::router {
namespace {

using ::testing::HasSubstr;

grpc::health::v1::HealthCheckResponse::ServingStatus check(const std::shared_ptr<grpc::Channel>& channel,
                                                           const std::string& service) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = health->Check(&context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return response.status();
}

TEST(RouterDrain, RefusesNewRequestsAndSaysNotServing) {
  RouterService router(RouterOptions{});
  auto port = router.start();
  ASSERT_TRUE(port.ok()) << port.status();
  testing::RouterClient client(*port);
  EXPECT_EQ(check(client.channel(), ""), grpc::health::v1::HealthCheckResponse::SERVING);

  router.begin_drain();
  EXPECT_TRUE(router.draining());
  EXPECT_EQ(check(client.channel(), ""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(check(client.channel(), "baton.v1.Baton"), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  const auto result = client.generate(testing::token_request({1, 2, 3}));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(), HasSubstr("draining"));

  const auto started = Clock::now();
  EXPECT_TRUE(router.drain(Clock::now() + std::chrono::seconds(30)));
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
  router.shutdown();
}

}  // namespace
}  // namespace baton::router
