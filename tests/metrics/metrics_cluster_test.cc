// /metrics on every process of a real local cluster (router, prefill node, decode node, as `baton
// up --metrics` starts them) after real traffic with EAGLE-3: promtool accepts every endpoint, and
// the counts agree with what the test sent and with the usage the router returned.
#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "metrics/names.h"
#include "tests/metrics/metrics_support.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

TEST(MetricsCluster, EveryProcessServesConsistentMetrics) {
  const SpecCase eagle3 = family_methods()[4];
  ASSERT_EQ(eagle3.label, "eagle3");
  cli::ClusterOptions options = cluster_options(eagle3.config, "ucx", "metrics");
  options.metrics = true;
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const auto targets = (*cluster)->scrape_targets();
  ASSERT_EQ(targets.size(), 3u);

  auto stub = v1::Baton::NewStub(grpc::CreateChannel((*cluster)->router_address(), grpc::InsecureChannelCredentials()));
  constexpr int kRequests = 3, kMaxTokens = 16;
  std::int64_t drafts = 0, draft_tokens = 0, accepted = 0;
  for (int i = 0; i < kRequests; ++i) {
    v1::GenerateRequest req;
    req.set_text(code_prompts()[static_cast<std::size_t>(i)]);
    req.mutable_sampling()->set_max_tokens(kMaxTokens);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_ignore_eos(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
      if (m.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) continue;
      drafts += m.usage().speculation().num_drafts();
      draft_tokens += m.usage().speculation().num_draft_tokens();
      accepted += m.usage().speculation().num_accepted_tokens();
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_GT(draft_tokens, 0);

  // The name clients use for the model: every series of every process carries it as model_name.
  std::string model_name;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    model_name = info.model();
  }
  ASSERT_FALSE(model_name.empty());
  // Every series any process exports is in docs/metrics.md, the operators' reference.
  std::ifstream doc_file(std::string(BATON_SOURCE_DIR) + "/docs/metrics.md");
  const std::string doc((std::istreambuf_iterator<char>(doc_file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(doc.empty());
  for (const metrics::ScrapeTarget& t : targets) {
    SCOPED_TRACE(t.role + " " + t.node);
    auto body = scrape(t.metrics_address);
    ASSERT_TRUE(body.has_value());
    for (const auto& s : parse_samples(*body)) {
      // A histogram's _bucket/_sum/_count samples are documented under the histogram's name.
      std::string family = s.name;
      for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
        if (family.size() > suffix.size() && family.ends_with(suffix)) family.resize(family.size() - suffix.size());
      }
      EXPECT_TRUE(doc.find("`" + family) != std::string::npos) << family << " is exported but not in docs/metrics.md";
      const auto label = s.labels.find("model_name");
      EXPECT_TRUE(label != s.labels.end() && label->second == model_name) << s.name << " lacks model_name=" << model_name;
    }
    const PromtoolResult lint = promtool_check(*body);
    EXPECT_EQ(lint.exit_code, 0) << lint.output;
    const auto samples = parse_samples(*body);
    const std::map<std::string, std::string> labels = {{"role", t.role}, {"node", t.node}};
    if (t.role == "decode") {
      // The decode node drafted every speculative step of these requests (P only the first token).
      EXPECT_EQ(sum_of(samples, metrics::kSpecDrafts, {{"method", "eagle3"}, {"node", t.node}}), drafts);
      EXPECT_EQ(sum_of(samples, metrics::kSpecDraftTokens, labels), draft_tokens);
      EXPECT_EQ(sum_of(samples, metrics::kSpecAcceptedTokens, labels), accepted);
      EXPECT_EQ(count_of(samples, metrics::kSpecAcceptedPerPos), 4u);  // k = 4
      EXPECT_EQ(sum_of(samples, metrics::kSpecAcceptedPerPos, labels), accepted);
      // Fixed k: every proposal (one per step, for the step's whole batch) asked for 4 drafts.
      EXPECT_EQ(count_of(samples, metrics::kSpecProposalsByLength), 5u);  // lengths 0..4
      EXPECT_GT(sum_of(samples, metrics::kSpecProposalsByLength, {{"length", "4"}, {"node", t.node}}), 0);
      EXPECT_EQ(sum_of(samples, metrics::kSpecProposalsByLength, {{"length", "0"}, {"node", t.node}}), 0);
      EXPECT_GE(sum_of(samples, metrics::kGenerationTokens, labels), kRequests * (kMaxTokens - 1));
      EXPECT_GT(sum_of(samples, metrics::kKvBlocks, {{"pool", "target"}, {"state", "total"}}), 0);
      EXPECT_EQ(sum_of(samples, metrics::kLocalPrefills, labels), 0);
    } else if (t.role == "prefill") {
      EXPECT_EQ(sum_of(samples, std::string(metrics::kKvTransferSeconds) + "_count", labels), kRequests);
      EXPECT_GT(sum_of(samples, metrics::kKvTransferBytes, labels), 0);
      EXPECT_EQ(sum_of(samples, metrics::kKvTransferFailures, labels), 0);
      EXPECT_GT(sum_of(samples, metrics::kPromptTokens, labels), 0);
      // Its state machine: every call through every state once.
      for (const char* state : {"checking", "prefilling", "flushing", "committing", "answered"}) {
        auto with_state = labels;
        with_state["state"] = state;
        EXPECT_EQ(sum_of(samples, "baton_prefill_state_entered_total", with_state), kRequests) << state;
      }
    } else {
      ASSERT_EQ(t.role, "router");
      const std::map<std::string, std::string> served = {{"method", "eagle3"}, {"node", t.node}};
      EXPECT_EQ(sum_of(samples, std::string(metrics::kTimeToFirstToken) + "_count", served), kRequests);
      EXPECT_EQ(sum_of(samples, std::string(metrics::kE2eLatency) + "_count", served), kRequests);
      EXPECT_EQ(sum_of(samples, std::string(metrics::kTimePerOutputToken) + "_count", served), kRequests);
      // Each request's phases: all disaggregated here, so each had a KV transfer too.
      for (const char* phase : {metrics::kRequestQueueTime, metrics::kRequestPrefillTime, metrics::kRequestKvTransferTime,
                                metrics::kRequestDecodeTime}) {
        EXPECT_EQ(sum_of(samples, std::string(phase) + "_count", served), kRequests) << phase;
      }
      EXPECT_GT(sum_of(samples, std::string(metrics::kRequestPrefillTime) + "_sum", served), 0) << "prefill took no time";
      EXPECT_GT(sum_of(samples, std::string(metrics::kRequestDecodeTime) + "_sum", served), 0) << "decode took no time";
      EXPECT_EQ(sum_of(samples, metrics::kRequestSuccess, {{"finished_reason", "length"}}), kRequests);
      EXPECT_EQ(sum_of(samples, metrics::kRouterRequestsRunning), 0);
      EXPECT_EQ(sum_of(samples, "baton_router_requests_total"), kRequests);
      // The request machine: each through its states once, P's and D's (no queue: there was room).
      for (const char* state : {"received", "admitted", "reserving", "prefilling", "streaming", "finished"}) {
        EXPECT_EQ(sum_of(samples, "baton_router_request_state_entered_total", {{"state", state}}), kRequests) << state;
      }
      EXPECT_EQ(sum_of(samples, "baton_router_request_state_entered_total", {{"state", "failed"}}), 0);
    }
  }
}

}  // namespace
}  // namespace baton::testing
