// router/request_flow stopping requests, against scripted nodes: the Abort RPC (mid-stream: the
// decode node aborted once; during prefill: both nodes once), the client going away and the
// request deadline. No node is blamed for any of these.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cluster.h"

namespace baton::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::abort_rpc;
using testing::Cluster;
using testing::OpenStream;
using testing::Router;
using testing::token_request;
using testing::usable;

TEST(RequestFlow, AbortRpcEndsTheStreamAndAbortsOnTheDecodeNodeOnce) {
  Cluster cluster(1);
  cluster.decode.hold_after_messages = true;
  Router router(cluster.options());
  auto request = token_request({5, 6, 7});
  request.set_request_id("abort-me");
  OpenStream stream(*router.client, request);
  ASSERT_TRUE(stream.read(2));  // P's first token and D's first message: D holds the stream open
  EXPECT_TRUE(abort_rpc(*router.client, "abort-me"));
  auto result = stream.finish();
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  // Whatever D had sent before the abort reached the router still arrives, then the last message.
  const auto ids = result.token_ids();
  ASSERT_GE(ids.size(), 2u);
  EXPECT_THAT(std::vector<std::int32_t>(ids.begin(), ids.begin() + 2), ElementsAre(10, 11));
  EXPECT_EQ(result.last().finish_reason(), baton::v1::FINISH_REASON_ABORT);
  EXPECT_THAT(result.last().error(), HasSubstr("Abort RPC"));
  EXPECT_EQ(result.last().usage().completion_tokens(), static_cast<std::int32_t>(ids.size()));
  EXPECT_EQ(cluster.decode.log.count("Abort abort-me.1"), 1);
  EXPECT_TRUE(cluster.decode.log.wait_for("Cancelled abort-me.1"));
  EXPECT_EQ(cluster.prefills[0]->log.count("Abort abort-me.1"), 0);  // P was done with it
  EXPECT_EQ(router.service.stats().requests_aborted.load(), 1);
  EXPECT_EQ(router.service.running_requests(), 0u);
  EXPECT_FALSE(abort_rpc(*router.client, "abort-me"));
  EXPECT_TRUE(usable(router.service, cluster.decode.address()));
}

TEST(RequestFlow, AbortRpcDuringPrefillAbortsOnBothNodes) {
  Cluster cluster(1);
  cluster.prefills[0]->hold = true;
  Router router(cluster.options());
  auto request = token_request({5, 6, 7});
  request.set_request_id("early");
  OpenStream stream(*router.client, request);
  ASSERT_TRUE(cluster.prefills[0]->log.wait_for("Prefill early.1 3"));
  EXPECT_TRUE(abort_rpc(*router.client, "early"));
  auto result = stream.finish();
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.messages.size(), 1u);
  EXPECT_EQ(result.last().finish_reason(), baton::v1::FINISH_REASON_ABORT);
  EXPECT_EQ(result.last().usage().completion_tokens(), 0);
  EXPECT_TRUE(cluster.prefills[0]->log.wait_for("Cancelled early.1"));
  EXPECT_EQ(cluster.prefills[0]->log.count("Abort early.1"), 1);
  EXPECT_EQ(cluster.decode.log.count("Abort early.1"), 1);
  EXPECT_EQ(router.service.stats().retries.load(), 0);
  EXPECT_TRUE(usable(router.service, cluster.prefills[0]->address()));
}

TEST(RequestFlow, ClientCancellationAbortsOnTheDecodeNode) {
  Cluster cluster(1);
  cluster.decode.hold_after_messages = true;
  Router router(cluster.options());
  auto request = token_request({5, 6, 7});
  request.set_request_id("gone");
  OpenStream stream(*router.client, request);
  ASSERT_TRUE(stream.read(2));
  stream.context.TryCancel();
  EXPECT_EQ(stream.finish().status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(cluster.decode.log.wait_for("Abort gone.1"));
  EXPECT_TRUE(cluster.decode.log.wait_for("Cancelled gone.1"));
  EXPECT_EQ(cluster.decode.log.count("Abort gone.1"), 1);
  EXPECT_TRUE(usable(router.service, cluster.decode.address()));  // the client left; the node is fine
}

TEST(RequestFlow, RequestDeadlineStopsAHungStream) {
  Cluster cluster(1);
  cluster.decode.hold_after_messages = true;
  auto options = cluster.options();
  options.flow.request_timeout = std::chrono::milliseconds(300);
  Router router(options);
  auto request = token_request({5, 6, 7});
  request.set_request_id("slow");
  auto result = router.client->generate(request);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(result.status.error_message(), HasSubstr("--request-timeout-ms (300 ms)"));
  EXPECT_TRUE(cluster.decode.log.wait_for("Abort slow.1"));
  EXPECT_TRUE(usable(router.service, cluster.decode.address()));
}

// A decode stream that goes quiet after its first messages is ended at the progress timeout,
// well before the request deadline, with UNAVAILABLE saying which node and why, and the request
// is aborted on the node (which frees its blocks).
TEST(RequestFlow, ProgressTimeoutEndsAStalledStream) {
  Cluster cluster(1);
  cluster.decode.hold_after_messages = true;
  auto options = cluster.options();
  options.flow.progress_timeout = std::chrono::milliseconds(300);
  Router router(options);
  auto request = token_request({5, 6, 7});
  request.set_request_id("stalled");
  const auto start = std::chrono::steady_clock::now();
  auto result = router.client->generate(request);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(), HasSubstr("sent nothing for 300 ms"));
  EXPECT_THAT(result.status.error_message(), HasSubstr(cluster.decode.address()));
  EXPECT_TRUE(cluster.decode.log.wait_for("Abort stalled.1"));
}

}  // namespace
}  // namespace baton::router
