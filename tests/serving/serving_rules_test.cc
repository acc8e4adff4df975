// The P/D rule and layout fingerprints, enforced by the real processes: a decode node with k = 0
// and a prefill node with k = 3 refuse to start, naming both values, the model kind and the rule;
// a router refuses to pair nodes that break the rule or whose KV layouts differ, telling the
// client and its log; and a prefill node refuses a destination with another layout before any
// byte moves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

TEST(ServingRules, DecodeNodeWithKZeroRefusesToStart) {
  const auto [code, output] = run_to_exit({binary("baton-decode"), "--insecure", "--model", family_path("target"), "--port", "0",
                                           "--speculative-config", R"({"method":"ngram","num_speculative_tokens":0})"});
  EXPECT_EQ(code, 1) << output;
  EXPECT_THAT(output, HasSubstr("num_speculative_tokens"));
  EXPECT_THAT(output, HasSubstr("is 0 on a decode node"));
  EXPECT_THAT(output, HasSubstr("attention-only model"));
  EXPECT_THAT(output, HasSubstr("P/D rule requires k >= 1"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("ready on")));
}

TEST(ServingRules, PrefillNodeWithKThreeRefusesToStart) {
  const std::string spec =
      R"({"method":"eagle3","model":")" + family_path("eagle3") + R"(","num_speculative_tokens":3})";
  const auto [code, output] =
      run_to_exit({binary("baton-prefill"), "--insecure", "--model", family_path("target"), "--port", "0", "--speculative-config", spec});
  EXPECT_EQ(code, 1) << output;
  EXPECT_THAT(output, HasSubstr("is 3 on a prefill node"));
  EXPECT_THAT(output, HasSubstr("attention-only model"));
  EXPECT_THAT(output, HasSubstr("the P/D rule requires 1 there"));
}

// NCCL moves the pools' device memory: it needs a CUDA device and cannot share a node with the
// host-memory transports. Both are refused at start, before the model loads.
TEST(ServingRules, NcclTransportRefusesACpuDeviceAndOtherTransports) {
  const auto [code, output] =
      run_to_exit({binary("baton-decode"), "--insecure", "--model", family_path("target"), "--port", "0", "--transport", "nccl"});
  EXPECT_EQ(code, 1) << output;
  EXPECT_THAT(output, HasSubstr("--transport nccl needs --device cuda"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("ready on")));
  const auto [code2, output2] =
      run_to_exit({binary("baton-prefill"), "--insecure", "--model", family_path("target"), "--port", "0", "--transport", "ucx,nccl"});
  EXPECT_EQ(code2, 1) << output2;
  EXPECT_THAT(output2, HasSubstr("nccl cannot be combined with another transport"));
  const auto [code3, output3] =
      run_to_exit({binary("baton-prefill"), "--insecure", "--model", family_path("target"), "--port", "0", "--transport", "nccl"});
  EXPECT_EQ(code3, 1) << output3;
  EXPECT_THAT(output3, HasSubstr("--transport nccl needs --device cuda"));
}

// A router given nodes that break the rule (P drafts with n-gram, D with suffix decoding) refuses
// the pair: the client gets FAILED_PRECONDITION with the rule, and the router's log says why.
TEST(ServingRules, RouterRefusesPairsThatBreakTheRule) {
  cli::ClusterOptions o = cluster_options(R"({"method":"suffix","num_speculative_tokens":4})", "ucx", "rule-pair");
  o.prefill_args = {"--speculative-config", R"({"method":"ngram","num_speculative_tokens":1})"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 8;
  const Completion c = generate(*stub, text_request(code_prompts()[1], p));
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.status.error_message();
  EXPECT_THAT(c.status.error_message(), HasSubstr("cannot be paired"));
  EXPECT_THAT(c.status.error_message(), HasSubstr("ngram"));
  EXPECT_THAT(c.status.error_message(), HasSubstr("suffix"));
  const auto logged = (*cluster)->router().process->wait_for_line("cannot be paired", std::chrono::seconds(10));
  EXPECT_TRUE(logged.ok()) << logged.status();
}

// P runs float32 weights, D bfloat16: their KV layouts differ. The router refuses the pair; asked
// directly, P refuses D's destination before sending a byte, and D's reservation can be released.
TEST(ServingRules, DifferentLayoutsNeverExchangeBytes) {
  cli::ClusterOptions o = cluster_options(std::nullopt, "ucx", "fingerprint");
  o.prefill_args = {"--dtype", "float32"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 8;
  const Completion c = generate(*router_stub((*cluster)->router_address()), text_request(code_prompts()[1], p));
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.status.error_message();
  EXPECT_THAT(c.status.error_message(), HasSubstr("fingerprint"));

  auto d = decode_stub((*cluster)->nodes("decode").front()->address);
  auto pn = prefill_stub((*cluster)->nodes("prefill").front()->address);
  node::v1::KvDestination dest;
  {
    grpc::ClientContext ctx;
    node::v1::ReserveRequest r;
    r.set_request_id("fp-1");
    r.set_prompt_len(40);
    ASSERT_TRUE(d->Reserve(&ctx, r, &dest).ok());
  }
  EXPECT_GT(node_info(*d).load().pools(0).reserved(), 0);
  node::v1::PrefillRequest req;
  req.set_request_id("fp-1");
  for (int i = 0; i < 40; ++i) req.add_prompt(100 + i);
  *req.mutable_destination() = dest;
  grpc::ClientContext ctx;
  node::v1::PrefillResponse resp;
  const grpc::Status s = pn->Prefill(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("different KV layout; nothing was sent"));
  EXPECT_THAT(s.error_message(), HasSubstr("weight dtype"));
  EXPECT_EQ(node_info(*pn).load().kv_bytes_sent(), 0);
  {
    // Only with the reservation's token (its capability) is it released.
    grpc::ClientContext rctx;
    node::v1::ReleaseRequest r;
    r.set_request_id("fp-1");
    node::v1::ReleaseResponse released;
    EXPECT_EQ(d->Release(&rctx, r, &released).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_GT(node_info(*d).load().pools(0).reserved(), 0);
    grpc::ClientContext again;
    r.set_capability(dest.capability());
    ASSERT_TRUE(d->Release(&again, r, &released).ok());
    EXPECT_TRUE(released.found());
  }
  expect_no_kv_held(node_info(*d));
}

}  // namespace
}  // namespace baton::testing
