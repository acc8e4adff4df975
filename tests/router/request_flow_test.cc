// router/request_flow through the real router service, against scripted prefill and decode nodes
// (fake_nodes.h): the disaggregated path and its usage, local prefill and its counted fallbacks,
// the one retry before the first token, errors that name the node and validation before any node
// call. Stopping requests: request_flow_stop_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cluster.h"

namespace baton::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::Cluster;
using testing::Router;
using testing::token_request;
using testing::usable;

TEST(RequestFlow, DisaggregatedStreamsPsFirstTokenThenDsTokensWithUsage) {
  Cluster cluster(1);
  Router router(cluster.options());
  auto request = token_request({5, 6, 7, 8, 9});
  request.mutable_sampling()->set_logprobs(1);
  auto result = router.client->generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_THAT(result.token_ids(), ElementsAre(10, 11, 12, 13, 14));
  EXPECT_EQ(result.text(), "<10><11><12><13><14>");
  ASSERT_EQ(result.messages.size(), 4u);
  // The first token, from P, has its own message (with its logprob) before D's stream.
  EXPECT_THAT(result.messages[0].token_ids(), ElementsAre(10));
  ASSERT_EQ(result.messages[0].logprobs_size(), 1);
  EXPECT_FLOAT_EQ(result.messages[0].logprobs(0).logprob(), -0.25f);
  const std::string id = result.messages[0].request_id();
  EXPECT_THAT(id, StartsWith("req-"));
  for (const auto& m : result.messages) EXPECT_EQ(m.request_id(), id);
  for (std::size_t i = 0; i + 1 < result.messages.size(); ++i) {
    EXPECT_EQ(result.messages[i].finish_reason(), baton::v1::FINISH_REASON_UNSPECIFIED);
  }

  const auto& last = result.last();
  EXPECT_EQ(last.finish_reason(), baton::v1::FINISH_REASON_STOP);
  EXPECT_EQ(last.stop_token(), 14);
  const auto& u = last.usage();
  EXPECT_EQ(u.prompt_tokens(), 5);
  EXPECT_EQ(u.completion_tokens(), 5);
  EXPECT_EQ(u.cached_prompt_tokens(), 3);  // P's
  EXPECT_EQ(u.speculation().num_drafts(), 2);
  EXPECT_EQ(u.speculation().num_accepted_tokens(), 3);
  EXPECT_DOUBLE_EQ(u.timings().prefill_ms(), 1.5);
  EXPECT_DOUBLE_EQ(u.timings().kv_transfer_ms(), 0.5);
  EXPECT_GT(u.timings().time_to_first_token_ms(), 0);
  EXPECT_GE(u.timings().end_to_end_ms(), u.timings().time_to_first_token_ms());
  EXPECT_GE(u.timings().time_to_first_token_ms(), u.timings().router_queue_ms());
  EXPECT_EQ(u.prefill_node(), cluster.prefills[0]->address());
  EXPECT_EQ(u.decode_node(), cluster.decode.address());
  EXPECT_FALSE(u.local_prefill());
  EXPECT_EQ(u.transport(), "grpc");

  // Node-call ids are "<request_id>.<attempt>"; D was reserved, then streamed; nothing released.
  EXPECT_THAT(cluster.decode.log.calls(), ElementsAre("Reserve " + id + ".1", "Decode " + id + ".1"));
  EXPECT_THAT(cluster.prefills[0]->log.calls(), ElementsAre("Prefill " + id + ".1 5"));
  EXPECT_EQ(router.service.stats().disaggregated.load(), 1);
  EXPECT_EQ(router.service.stats().requests.load(), 1);
  EXPECT_EQ(router.service.stats().requests_failed.load(), 0);
  // Its way through the machine: every state once, but the queue (there was room) and failed.
  std::vector<std::int64_t> entered;
  for (const auto& n : router.service.stats().entered) entered.push_back(n.load());
  //                               received queued admitted reserving prefilling streaming finished failed
  EXPECT_THAT(entered, ElementsAre(1,       0,     1,       1,        1,         1,        1,       0));
}

TEST(RequestFlow, ClientRequestIdsAreKept) {
  Cluster cluster(1);
  Router router(cluster.options());
  auto request = token_request({5, 6});
  request.set_request_id("client-7");
  auto result = router.client->generate(request);
  ASSERT_TRUE(result.status.ok());
  EXPECT_EQ(result.last().request_id(), "client-7");
  // Nodes know it with a random suffix: two callers' ids never meet on a node.
  EXPECT_EQ(cluster.decode.log.count("Reserve client-7.1"), 1);  // the log drops the suffix
  ASSERT_FALSE(cluster.decode.log.raw_calls().empty());
  EXPECT_THAT(cluster.decode.log.raw_calls().front(), ::testing::MatchesRegex("Reserve client-7~[0-9a-f]{16}[.]1"));
}

TEST(RequestFlow, FinishedAtTheFirstTokenReleasesTheReservation) {
  Cluster cluster(1);
  cluster.prefills[0]->finish_at_first_token = true;
  Router router(cluster.options());
  auto request = token_request({5, 6, 7});
  request.set_request_id("short");
  auto result = router.client->generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.messages.size(), 1u);
  EXPECT_THAT(result.last().token_ids(), ElementsAre(10));
  EXPECT_EQ(result.last().finish_reason(), baton::v1::FINISH_REASON_STOP);
  EXPECT_EQ(result.last().stop_token(), 10);
  EXPECT_EQ(result.last().usage().completion_tokens(), 1);
  EXPECT_TRUE(cluster.decode.log.wait_for("Release short.1"));
}

TEST(RequestFlow, ShortPromptsPrefillLocallyAndAreCounted) {
  Cluster cluster(1);
  auto options = cluster.options();
  options.flow.local_prefill_max_tokens = 4;
  Router router(options);
  auto result = router.client->generate(token_request({5, 6, 7, 8}));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_THAT(result.token_ids(), ElementsAre(10, 11, 12, 13, 14));
  const auto& u = result.last().usage();
  EXPECT_TRUE(u.local_prefill());
  EXPECT_EQ(u.prefill_node(), "");
  EXPECT_EQ(u.transport(), "");
  EXPECT_EQ(u.cached_prompt_tokens(), 2);  // D's
  EXPECT_DOUBLE_EQ(u.timings().prefill_ms(), 4.0);
  EXPECT_EQ(u.prompt_tokens(), 4);
  EXPECT_TRUE(cluster.prefills[0]->log.calls().empty());
  EXPECT_EQ(router.service.stats().local_prefill_short_prompt.load(), 1);

  auto forced = token_request({5, 6, 7, 8, 9, 10});
  forced.set_force_local_prefill(true);
  ASSERT_TRUE(router.client->generate(forced).status.ok());
  EXPECT_EQ(router.service.stats().local_prefill_forced.load(), 1);
  // Longer prompts disaggregate.
  ASSERT_TRUE(router.client->generate(token_request({5, 6, 7, 8, 9})).status.ok());
  EXPECT_EQ(router.service.stats().disaggregated.load(), 1);
}

TEST(RequestFlow, RefusedPairsFailWithTheRule) {
  // P speculates with EAGLE-3, D does not: the P/D rule refuses the pair, and that is an error to
  // the client (never a silent local prefill), whether or not the local fallback is on.
  Cluster cluster(1, "", 0, "eagle3", 1);
  for (const bool fallback : {true, false}) {
    auto options = cluster.options();
    options.flow.local_fallback = fallback;
    Router router(options);
    auto result = router.client->generate(token_request({5, 6, 7}));
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(result.status.error_message(), HasSubstr("cannot be paired"));
    EXPECT_THAT(result.status.error_message(), HasSubstr("the prefill node speculates (method eagle3)"));
    EXPECT_THAT(result.status.error_message(), HasSubstr("the P/D rule:"));
    EXPECT_TRUE(cluster.prefills[0]->log.calls().empty());
  }
}

TEST(RequestFlow, NoPrefillNodeMeansLocalPrefill) {
  Cluster cluster(0);
  Router router(cluster.options());
  auto result = router.client->generate(token_request({5, 6, 7}));
  ASSERT_TRUE(result.status.ok());
  EXPECT_TRUE(result.last().usage().local_prefill());
  EXPECT_EQ(router.service.stats().local_prefill_no_prefill_node.load(), 1);
}

TEST(RequestFlow, PrefillFailureBeforeTheFirstTokenIsRetriedOnceOnAnotherPrefillNode) {
  Cluster cluster(2);
  cluster.prefills[0]->status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill node is restarting");
  Router router(cluster.options());
  auto request = token_request({5, 6, 7});
  request.set_request_id("r");
  auto result = router.client->generate(request);  // p0 has the shorter queue: chosen first
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_THAT(result.token_ids(), ElementsAre(10, 11, 12, 13, 14));
  EXPECT_EQ(result.last().usage().prefill_node(), cluster.prefills[1]->address());
  EXPECT_THAT(cluster.prefills[0]->log.calls(), ElementsAre("Prefill r.1 3", "Abort r.1"));
  EXPECT_THAT(cluster.prefills[1]->log.calls(), ElementsAre("Prefill r.2 3"));
  EXPECT_EQ(cluster.decode.log.count("Release r.1"), 1);
  EXPECT_EQ(cluster.decode.log.count("Reserve r.2"), 1);
  EXPECT_EQ(router.service.stats().retries.load(), 1);
  // The second attempt went through reserving and prefilling again.
  const auto& entered = router.service.stats().entered;
  EXPECT_EQ(entered[static_cast<int>(RequestState::kReserving)].load(), 2);
  EXPECT_EQ(entered[static_cast<int>(RequestState::kPrefilling)].load(), 2);
  EXPECT_EQ(entered[static_cast<int>(RequestState::kFinished)].load(), 1);
  EXPECT_FALSE(usable(router.service, cluster.prefills[0]->address()));  // marked at once
  EXPECT_TRUE(usable(router.service, cluster.prefills[1]->address()));
  // The next poll finds it answering again.
  router.service.nodes().poll_once();
  EXPECT_TRUE(usable(router.service, cluster.prefills[0]->address()));
}

TEST(RequestFlow, WithoutAnotherPrefillNodeTheRetryPrefillsLocally) {
  Cluster cluster(1);
  cluster.prefills[0]->status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow");
  Router router(cluster.options());
  auto request = token_request({5, 6, 7});
  request.set_request_id("r");
  auto result = router.client->generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_TRUE(result.last().usage().local_prefill());
  EXPECT_EQ(cluster.decode.log.count("Decode local r.2"), 1);
  EXPECT_EQ(router.service.stats().local_prefill_no_prefill_node.load(), 1);
}

TEST(RequestFlow, RejectedPrefillsReachTheClientAsTheyAre) {
  Cluster cluster(2);
  cluster.prefills[0]->status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p must be in (0, 1]");
  Router router(cluster.options());
  auto request = token_request({5, 6, 7});
  request.set_request_id("bad");
  auto result = router.client->generate(request);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(result.status.error_message(),
            "prefill node " + cluster.prefills[0]->address() + ": sampling.top_p must be in (0, 1]");
  EXPECT_TRUE(result.messages.empty());
  EXPECT_TRUE(cluster.decode.log.wait_for("Release bad.1"));
  EXPECT_TRUE(cluster.prefills[1]->log.calls().empty());  // no retry
  EXPECT_EQ(cluster.prefills[0]->log.count("Abort bad.1"), 0);
  EXPECT_TRUE(usable(router.service, cluster.prefills[0]->address()));
  EXPECT_EQ(router.service.stats().requests_failed.load(), 1);
}

TEST(RequestFlow, DecodeFailureAfterTheFirstTokenIsAnErrorNamingTheNode) {
  Cluster cluster(1);
  cluster.decode.fail_after_messages = 1;
  Router router(cluster.options());
  auto result = router.client->generate(token_request({5, 6, 7}));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr("decode node " + cluster.decode.address() + ": decode node lost its device"));
  EXPECT_THAT(result.token_ids(), ElementsAre(10, 11));  // what arrived before
  EXPECT_FALSE(usable(router.service, cluster.decode.address()));
  EXPECT_EQ(router.service.stats().retries.load(), 0);
  // With its only decode node unusable, the next request is refused at once.
  auto next = router.client->generate(token_request({5, 6, 7}));
  EXPECT_EQ(next.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(next.status.error_message(), HasSubstr("a request-path call failed"));
}

TEST(RequestFlow, NoRetryOnceThePrefillNodesFirstTokenWasSent) {
  Cluster cluster(2);
  cluster.decode.fail_after_messages = 0;  // D fails before its first message, after P's token
  Router router(cluster.options());
  auto result = router.client->generate(token_request({5, 6, 7}));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.token_ids(), ElementsAre(10));
  EXPECT_GT(result.messages[0].request_id().size(), 0u);
  EXPECT_EQ(router.service.stats().retries.load(), 0);
  EXPECT_TRUE(cluster.prefills[1]->log.calls().empty());
}

TEST(RequestFlow, ReserveFailureIsNamedAfterTheDecodeNode) {
  Cluster cluster(1);
  cluster.decode.reserve_status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no free KV blocks");
  Router router(cluster.options());
  auto result = router.client->generate(token_request({5, 6, 7}));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(result.status.error_message(), HasSubstr("no free KV blocks"));
  EXPECT_THAT(result.status.error_message(), HasSubstr("decode node " + cluster.decode.address()));
  // Tried once more, but there is no other decode node.
  EXPECT_THAT(result.status.error_message(), HasSubstr("(not retried: no usable decode node (1 known: " +
                                                       cluster.decode.address() + ": failed this request already"));
  EXPECT_TRUE(cluster.prefills[0]->log.calls().empty());
}

TEST(RequestFlow, ValidationHappensBeforeAnyNodeCall) {
  Cluster cluster(1);
  Router router(cluster.options());
  auto out_of_vocab = router.client->generate(token_request({5, 4096}));
  EXPECT_EQ(out_of_vocab.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out_of_vocab.status.error_message(), HasSubstr("prompt.token_ids[1] = 4096 is outside [0, 4096)"));
  auto too_long = router.client->generate(token_request(std::vector<std::int32_t>(2040, 1), /*max_tokens=*/9));
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_long.status.error_message(), HasSubstr("exceeds max_model_len 2048"));
  EXPECT_TRUE(cluster.decode.log.calls().empty());
  EXPECT_TRUE(cluster.prefills[0]->log.calls().empty());
}

}  // namespace
}  // namespace baton::router
