// router/request_flow through the real router service, against scripted prefill and decode nodes
// (fake_nodes.h): the disaggregated path and its usage, local prefill and its counted fallbacks,
// the one retry before the first token, errors that name the node, the Abort RPC, client
// cancellation and validation before any node call.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_nodes.h"
#include "node_info_builders.h"
#include "router/router_service.h"
#include "router_client.h"

namespace baton::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::FakeDecodeNode;
using testing::FakePrefillNode;
using testing::node_info;
using testing::token_request;
using testing::with_load;

class Cluster {
 public:
  // One decode node and `num_prefill` prefill nodes (specs: {method, k} of D and of every P).
  Cluster(int num_prefill, const std::string& d_method = "", int d_k = 0, const std::string& p_method = "",
          int p_k = 0)
      : decode(with_load(node_info("decode", d_method, d_k), 500)) {
    for (int i = 0; i < num_prefill; ++i) {
      prefills.push_back(std::make_unique<FakePrefillNode>(
          with_load(node_info("prefill", p_method, p_k), 0, 0, 0, /*queued=*/i * 100),
          std::map<std::string, FakeDecodeNode*>{{decode.address(), &decode}}));
    }
  }

  RouterOptions options() const {
    RouterOptions o;
    o.decode_addresses = {decode.address()};
    for (const auto& p : prefills) o.prefill_addresses.push_back(p->address());
    o.poll_interval = std::chrono::minutes(1);  // the tests decide when nodes are polled
    o.flow.commit_timeout = std::chrono::seconds(10);
    return o;
  }

  FakeDecodeNode decode;
  std::vector<std::unique_ptr<FakePrefillNode>> prefills;
};

struct Router {
  explicit Router(const RouterOptions& options) : service(options) {
    auto port = service.start();
    EXPECT_TRUE(port.ok()) << port.status();
    client = std::make_unique<testing::RouterClient>(*port);
  }
  ~Router() { service.shutdown(); }
  RouterService service;
  std::unique_ptr<testing::RouterClient> client;
};

bool usable(RouterService& router, const std::string& address) {
  for (const auto& n : router.nodes().status()) {
    if (n.address == address) return n.usable;
  }
  return false;
}

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
}

TEST(RequestFlow, ClientRequestIdsAreKept) {
  Cluster cluster(1);
  Router router(cluster.options());
  auto request = token_request({5, 6});
  request.set_request_id("client-7");
  auto result = router.client->generate(request);
  ASSERT_TRUE(result.status.ok());
  EXPECT_EQ(result.last().request_id(), "client-7");
  EXPECT_EQ(cluster.decode.log.count("Reserve client-7.1"), 1);
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

TEST(RequestFlow, RefusedPairsFallBackToLocalPrefillOrFailWithTheRule) {
  // P speculates with EAGLE-3, D does not: the P/D rule refuses the pair.
  Cluster cluster(1, "", 0, "eagle3", 1);
  {
    Router router(cluster.options());
    auto result = router.client->generate(token_request({5, 6, 7}));
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    EXPECT_TRUE(result.last().usage().local_prefill());
    EXPECT_EQ(router.service.stats().local_prefill_no_pair.load(), 1);
    EXPECT_TRUE(cluster.prefills[0]->log.calls().empty());
  }
  auto strict = cluster.options();
  strict.flow.local_fallback = false;
  Router router(strict);
  auto result = router.client->generate(token_request({5, 6, 7}));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(result.status.error_message(), HasSubstr("cannot be paired"));
  EXPECT_THAT(result.status.error_message(), HasSubstr("the prefill node speculates (method eagle3)"));
  EXPECT_THAT(result.status.error_message(), HasSubstr("the P/D rule:"));
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

// Reads a Generate stream up to its `n`th message.
class OpenStream {
 public:
  OpenStream(testing::RouterClient& client, const baton::v1::GenerateRequest& request)
      : reader_(client.stub().Generate(&context, request)) {}
  bool read(int n) {
    for (int i = 0; i < n; ++i) {
      baton::v1::GenerateResponse m;
      if (!reader_->Read(&m)) return false;
      result.messages.push_back(m);
    }
    return true;
  }
  testing::GenerateResult finish() {
    baton::v1::GenerateResponse m;
    while (reader_->Read(&m)) result.messages.push_back(m);
    result.status = reader_->Finish();
    return result;
  }
  grpc::ClientContext context;
  testing::GenerateResult result;

 private:
  std::unique_ptr<grpc::ClientReader<baton::v1::GenerateResponse>> reader_;
};

bool abort_rpc(testing::RouterClient& client, const std::string& id) {
  grpc::ClientContext context;
  baton::v1::AbortRequest abort;
  abort.set_request_id(id);
  baton::v1::AbortResponse response;
  EXPECT_TRUE(client.stub().Abort(&context, abort, &response).ok());
  return response.found();
}

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

}  // namespace
}  // namespace baton::router
