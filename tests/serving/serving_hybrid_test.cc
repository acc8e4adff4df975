// A hybrid model (Qwen3-Next: Gated DeltaNet layers with a recurrent state, gated attention, MoE)
// through router -> prefill node -> decode node, real processes on loopback: the KV of the
// attention layers and the recurrent state after the prompt (one slot per DeltaNet layer) move
// over the real UCX or gRPC transport, and every request yields exactly what one local engine
// yields — greedy, and seeded sampled tokens — with no speculation, n-gram, suffix, MTP, EAGLE-3
// and a draft model, P and D running the same k (the P/D rule's hybrid branch; `baton up` gives
// both nodes the decode k). A pair that breaks that branch (P k = 1, D k = 2) is refused by the
// router and, asked directly, by the prefill node before a byte moves; the refusal names the rule
// and the state's slots.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/engine/fixtures.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

std::string hybrid_model() { return fixture_path("qwen3-next-f32"); }

struct HybridCase {
  std::string label;
  std::optional<std::string> spec;
  std::string transport;
  std::string model = "qwen3-next-f32";  // a fixture, or testing::kBundledHybrid
  std::string name() const { return label + "_" + transport; }
};

void PrintTo(const HybridCase& c, std::ostream* os) { *os << c.label << " over " << c.transport; }

class ServingHybrid : public ::testing::TestWithParam<HybridCase> {};

TEST_P(ServingHybrid, DisaggregatedEqualsLocal) {
  const HybridCase& c = GetParam();
  std::vector<std::string> prompts = {"def add(a, b):", "hello hello hello hello", code_prompts()[6]};
  std::vector<SamplingParams> params(prompts.size());
  for (SamplingParams& p : params) {
    p.temperature = 0.0f;
    p.max_tokens = 24;
    p.ignore_eos = true;
  }
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    prompts.push_back(prompts[seed % 3]);
    SamplingParams p;
    p.temperature = 0.8f;
    p.max_tokens = 16;
    p.ignore_eos = true;
    p.seed = seed * 7919;
    params.push_back(p);
  }
  const std::string model = fixture_path(c.model);
  const std::vector<LocalResult> expected = run_local(c.spec, prompts, params, std::nullopt, model);

  auto cluster = cli::LocalCluster::start(cluster_options(c.spec, c.transport, "hybrid-" + c.name(), model));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  std::vector<v1::GenerateRequest> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) requests.push_back(text_request(prompts[i], params[i]));
  const std::vector<Completion> got = generate_all(*stub, requests);
  std::int64_t drafts = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, expected[i].ids);
    EXPECT_EQ(got[i].text, expected[i].text);
    EXPECT_FALSE(got[i].usage.local_prefill()) << "the router prefilled on the decode node";
    EXPECT_EQ(got[i].usage.transport(), c.transport);
    drafts += got[i].usage.speculation().num_drafts();
  }
  if (c.spec) {
    EXPECT_GT(drafts, 0) << "the decode node never drafted";
  }
  // Every state group and block is free again on both nodes.
  for (cli::ClusterProcess* p : (*cluster)->nodes("decode")) {
    const node::v1::NodeInfo info = node_info(*decode_stub(p->address));
    bool has_state = false;
    for (const node::v1::KvPoolUsage& pool : info.load().pools()) has_state |= pool.name() == "state";
    EXPECT_TRUE(has_state) << "the decode node reports no state pool";
    expect_no_kv_held(info);
  }
  for (cli::ClusterProcess* p : (*cluster)->nodes("prefill")) {
    const node::v1::NodeInfo info = node_info(*prefill_stub(p->address));
    expect_no_kv_held(info);
    EXPECT_GT(info.load().kv_bytes_sent(), 0);
  }
}

std::vector<HybridCase> hybrid_cases() {
  const std::string mtp = R"({"method":"mtp","model":")" + fixture_path("spec/mtp-next-qwen3-next-f32") +
                          R"(","num_speculative_tokens":2})";
  std::vector<HybridCase> out;
  for (const std::string transport : {"ucx", "grpc"}) {
    out.push_back({"plain", std::nullopt, transport});
    out.push_back({"ngram", R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})",
                   transport});
    out.push_back({"mtp", mtp, transport});
  }
  out.push_back({"suffix", R"({"method":"suffix","num_speculative_tokens":3})", "ucx"});
  // Proposers with KV pools of their own: pools target, draft, then state on both nodes.
  out.push_back({"eagle3", R"({"method":"eagle3","model":")" + fixture_path("spec/eagle3-qwen3-next-f32") +
                               R"(","num_speculative_tokens":3})",
                 "ucx"});
  out.push_back({"draft_model", R"({"method":"draft_model","model":")" + fixture_path("spec/draft-qwen3-next-f32") +
                                    R"(","num_speculative_tokens":2})",
                 "grpc"});
  // The bundled trained hybrid with its own MTP module (`mtp.*` in the target's checkpoint) on both
  // nodes, as `baton up --model models/baton-tiny-hybrid/target` runs it.
  out.push_back({"bundled_mtp", R"({"method":"mtp","num_speculative_tokens":2})", "ucx", testing::kBundledHybrid});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Methods, ServingHybrid, ::testing::ValuesIn(hybrid_cases()),
                         [](const ::testing::TestParamInfo<HybridCase>& i) { return i.param.name(); });

// P drafts one n-gram token, D two: fine for an attention-only model, not for a hybrid, whose
// state slots (1 + k) would not line up. The router refuses to pair them; asked directly, the
// prefill node refuses D's destination before sending a byte (the layout fingerprints differ in
// their recurrent-state slots), and D's reservation (a state group with it) is released.
TEST(ServingHybridRules, UnequalKIsRefusedByTheRouterAndThePrefillNode) {
  cli::ClusterOptions o = cluster_options(R"({"method":"ngram","num_speculative_tokens":2})", "ucx", "hybrid-rule",
                                          hybrid_model());
  o.prefill_args = {"--speculative-config", R"({"method":"ngram","num_speculative_tokens":1})"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 8;
  const Completion c = generate(*router_stub((*cluster)->router_address()), text_request("def add(a, b):", p));
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.status.error_message();
  EXPECT_THAT(c.status.error_message(), HasSubstr("recurrent layers"));
  EXPECT_THAT(c.status.error_message(), HasSubstr("the same num_speculative_tokens"));
  EXPECT_THAT(c.status.error_message(), HasSubstr("the P/D rule"));

  auto d = decode_stub((*cluster)->nodes("decode").front()->address);
  auto pn = prefill_stub((*cluster)->nodes("prefill").front()->address);
  node::v1::KvDestination dest;
  {
    grpc::ClientContext ctx;
    node::v1::ReserveRequest r;
    r.set_request_id("hybrid-rule-1");
    r.set_prompt_len(20);
    ASSERT_TRUE(d->Reserve(&ctx, r, &dest).ok());
  }
  EXPECT_GE(dest.state_group(), 0);
  node::v1::PrefillRequest req;
  req.set_request_id("hybrid-rule-1");
  for (int i = 0; i < 20; ++i) req.add_prompt(100 + i);
  *req.mutable_destination() = dest;
  grpc::ClientContext ctx;
  node::v1::PrefillResponse resp;
  const grpc::Status s = pn->Prefill(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("different KV layout; nothing was sent"));
  EXPECT_THAT(s.error_message(), HasSubstr("recurrent-state slots 2 here vs 3"));
  EXPECT_THAT(s.error_message(), HasSubstr("the P/D rule"));
  EXPECT_EQ(node_info(*pn).load().kv_bytes_sent(), 0);
  grpc::ClientContext rctx;
  node::v1::ReleaseRequest r;
  r.set_request_id("hybrid-rule-1");
  r.set_capability(dest.capability());
  node::v1::ReleaseResponse released;
  ASSERT_TRUE(d->Release(&rctx, r, &released).ok());
  EXPECT_TRUE(released.found());
  expect_no_kv_held(node_info(*d));
}

// A destination's state group is D's to give: one outside D's groups is refused by the prefill
// node, and one D did not reserve for the request is refused by D's destination check, so a
// prefill node never writes another request's recurrent state.
TEST(ServingHybridRules, AForgedStateGroupIsRefusedBeforeAnyByteMoves) {
  auto cluster = cli::LocalCluster::start(cluster_options(std::nullopt, "ucx", "hybrid-forged", hybrid_model()));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto d = decode_stub((*cluster)->nodes("decode").front()->address);
  auto pn = prefill_stub((*cluster)->nodes("prefill").front()->address);
  std::vector<node::v1::KvDestination> dests(2);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    node::v1::ReserveRequest r;
    r.set_request_id("forged-" + std::to_string(i));
    r.set_prompt_len(20);
    ASSERT_TRUE(d->Reserve(&ctx, r, &dests[static_cast<std::size_t>(i)]).ok());
  }
  ASSERT_NE(dests[0].state_group(), dests[1].state_group());
  const auto prefill = [&](node::v1::KvDestination dest) {
    node::v1::PrefillRequest req;
    req.set_request_id(dest.request_id());
    for (int i = 0; i < 20; ++i) req.add_prompt(100 + i);
    *req.mutable_destination() = std::move(dest);
    grpc::ClientContext ctx;
    node::v1::PrefillResponse resp;
    return pn->Prefill(&ctx, req, &resp);
  };
  node::v1::KvDestination outside = dests[0];
  outside.set_state_group(outside.pool_num_blocks(outside.pool_num_blocks_size() - 1));
  const grpc::Status s1 = prefill(outside);
  EXPECT_EQ(s1.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s1.error_message(), HasSubstr("recurrent state groups"));
  node::v1::KvDestination other = dests[0];
  other.set_state_group(dests[1].state_group());  // request 1's group, with request 0's token
  const grpc::Status s2 = prefill(other);
  EXPECT_EQ(s2.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s2.error_message(), HasSubstr("state group this decode node did not reserve"));
  EXPECT_EQ(node_info(*pn).load().kv_bytes_sent(), 0);
  for (const node::v1::KvDestination& dest : dests) {
    grpc::ClientContext rctx;
    node::v1::ReleaseRequest r;
    r.set_request_id(dest.request_id());
    r.set_capability(dest.capability());
    node::v1::ReleaseResponse released;
    ASSERT_TRUE(d->Release(&rctx, r, &released).ok());
  }
  expect_no_kv_held(node_info(*d));
}

}  // namespace
}  // namespace baton::testing
