// The Kubernetes native gRPC probe (grpc.health.v1 Check with an empty service name) on every
// binary: baton-router, baton-prefill, baton-decode and baton-proposer answer SERVING once ready.
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

void expect_serving(const std::string& binary_name, const std::string& address) {
  SCOPED_TRACE(binary_name + " at " + address);
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;  // service "": the whole server, as Kubernetes asks
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(HealthProbe, EveryBinaryAnswersTheKubernetesGrpcProbe) {
  const std::vector<std::string> node = {"--model", family_path("target"), "--port", "0", "--threads", "1",
                                         "--kv-cache-memory", "0.125"};
  std::vector<std::string> d_argv = {binary("baton-decode"), "--insecure"}, p_argv = {binary("baton-prefill"), "--insecure"};
  d_argv.insert(d_argv.end(), node.begin(), node.end());
  p_argv.insert(p_argv.end(), node.begin(), node.end());
  auto proposer = start_process({binary("baton-proposer"), "--insecure", "--port", "0"});
  auto d = start_process(d_argv);
  auto p = start_process(p_argv);
  const std::string d_address = ready_address(*d);
  auto router = start_process({binary("baton-router"), "--insecure", "--port", "0", "--decode", d_address});
  expect_serving("baton-proposer", ready_address(*proposer));
  expect_serving("baton-decode", d_address);
  expect_serving("baton-prefill", ready_address(*p));
  expect_serving("baton-router", ready_address(*router));
}

}  // namespace
}  // namespace baton::testing
