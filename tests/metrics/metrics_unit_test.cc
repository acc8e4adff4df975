// The metrics library on its own: a NodeInfo snapshot becomes the documented families with
// {method, role, node} labels, the endpoint serves them over real HTTP, promtool accepts the
// exposition, and the file_sd targets file has Prometheus's shape.
#include <atomic>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "prometheus/gauge.h"
#include "gtest/gtest.h"
#include "metrics/kv_transfer_metrics.h"
#include "metrics/metrics_server.h"
#include "metrics/names.h"
#include "metrics/node_collector.h"
#include "metrics/request_metrics.h"
#include "metrics/targets_file.h"
#include "nlohmann/json.hpp"
#include "tests/metrics/metrics_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

node::v1::NodeInfo decode_info() {
  node::v1::NodeInfo info;
  info.set_role("decode");
  info.set_address("127.0.0.1:7000");
  info.set_speculative_method("eagle3");
  info.set_num_speculative_tokens(3);
  node::v1::NodeLoad* load = info.mutable_load();
  load->set_num_running(2);
  load->set_num_waiting(5);
  load->set_local_prefills(4);
  node::v1::KvPoolUsage* pool = load->add_pools();
  pool->set_name("target");
  pool->set_num_blocks(100);
  pool->set_used(25);
  pool->set_free(75);
  pool->set_reserved(3);
  node::v1::SpecDecodeCounters* spec = load->mutable_counters()->mutable_spec();
  spec->set_num_drafts(10);
  spec->set_num_draft_tokens(30);
  spec->set_num_accepted_tokens(17);
  for (int n : {9, 5, 3}) spec->add_accepted_per_position(n);
  for (int n : {4, 0, 2, 6}) spec->add_proposals_by_length(n);
  load->mutable_counters()->set_lease_expiries(1);
  load->mutable_counters()->set_graph_replays(12);
  return info;
}

// The acceptance series say how drafts were verified, and a lossy rule (entropy verification)
// shows as lossless="false" on each of them.
TEST(Metrics, SpeculationSeriesCarryTheVerificationRule) {
  for (const std::string& rule : {std::string("block"), std::string("entropy"), std::string("")}) {
    auto server = metrics::MetricsServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    node::v1::NodeInfo info = decode_info();
    info.set_verification(rule);
    (*server)->add(std::make_shared<metrics::NodeCollector>([info] { return info; }));
    auto body = scrape((*server)->address());
    ASSERT_TRUE(body.has_value());
    const auto samples = parse_samples(*body);
    const std::string shown = rule.empty() ? "standard" : rule;
    const std::string lossless = rule == "entropy" ? "false" : "true";
    for (const char* name : {metrics::kSpecDrafts, metrics::kSpecDraftTokens, metrics::kSpecAcceptedTokens,
                             metrics::kSpecAcceptedPerPos, metrics::kSpecProposalsByLength}) {
      EXPECT_EQ(count_of(samples, name), count_of(samples, name, {{"verification", shown}, {"lossless", lossless}}))
          << name << " with rule '" << rule << "'";
      EXPECT_GT(count_of(samples, name), 0u) << name;
    }
    EXPECT_EQ(sum_of(samples, metrics::kSpecAcceptedTokens, {{"lossless", lossless}}), 17);
  }
}

TEST(Metrics, NodeSnapshotBecomesLabelledFamilies) {
  auto server = metrics::MetricsServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->add(std::make_shared<metrics::NodeCollector>([] { return decode_info(); }));
  auto body = scrape((*server)->address());
  ASSERT_TRUE(body.has_value());
  const auto samples = parse_samples(*body);
  const std::map<std::string, std::string> node = {{"method", "eagle3"}, {"role", "decode"}, {"node", "127.0.0.1:7000"}};
  EXPECT_EQ(sum_of(samples, metrics::kSpecDrafts, node), 10);
  EXPECT_EQ(sum_of(samples, metrics::kSpecDraftTokens, node), 30);
  EXPECT_EQ(sum_of(samples, metrics::kSpecAcceptedTokens, node), 17);
  EXPECT_EQ(count_of(samples, metrics::kSpecAcceptedPerPos), 3u);
  EXPECT_EQ(sum_of(samples, metrics::kSpecAcceptedPerPos, {{"position", "1"}}), 5);
  EXPECT_EQ(count_of(samples, metrics::kSpecProposalsByLength), 4u);
  EXPECT_EQ(sum_of(samples, metrics::kSpecProposalsByLength, {{"length", "0"}}), 4);
  EXPECT_EQ(sum_of(samples, metrics::kSpecProposalsByLength, {{"length", "3"}}), 6);
  EXPECT_EQ(sum_of(samples, metrics::kRequestsRunning, node), 2);
  EXPECT_EQ(sum_of(samples, metrics::kRequestsWaiting, node), 5);
  EXPECT_EQ(sum_of(samples, metrics::kKvBlocks, {{"pool", "target"}, {"state", "reserved"}}), 3);
  EXPECT_DOUBLE_EQ(sum_of(samples, metrics::kKvUsage, {{"pool", "target"}}), 0.25);
  EXPECT_EQ(sum_of(samples, metrics::kLocalPrefills, node), 4);
  EXPECT_EQ(sum_of(samples, metrics::kLeaseExpiries, node), 1);
  EXPECT_EQ(sum_of(samples, metrics::kGraphReplays, node), 12);
  EXPECT_EQ(count_of(samples, metrics::kKvTransferBytes), 0u);  // a decode node sends none
  const PromtoolResult lint = promtool_check(*body);
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
}

TEST(Metrics, NoSnapshotExportsNothingAndTheEndpointStillAnswers) {
  auto server = metrics::MetricsServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->add(std::make_shared<metrics::NodeCollector>([] { return std::optional<node::v1::NodeInfo>(); }));
  auto body = scrape((*server)->address());
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(count_of(parse_samples(*body), metrics::kSpecDrafts), 0u);
}

// set_model_name puts vLLM's model_name label on every series the process exports, instruments and
// collectors alike, and leaves a series that has its own alone.
TEST(Metrics, EverySeriesCarriesTheModelName) {
  auto server = metrics::MetricsServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->add(std::make_shared<metrics::NodeCollector>([] { return decode_info(); }));
  metrics::RequestMetrics requests((*server)->registry(), "127.0.0.1:50051");
  metrics::RequestObservation r;
  r.method = "eagle3";
  r.finished_reason = "length";
  r.got_first_token = true;
  r.ttft_s = 0.1;
  r.e2e_s = 0.5;
  r.output_tokens = 4;
  requests.observe(r);
  prometheus::BuildGauge().Name("baton_test_own_model").Help("h").Register((*server)->registry())
      .Add({{"model_name", "other"}}).Set(1);
  (*server)->set_model_name([] { return std::string("served-name"); });
  auto body = scrape((*server)->address());
  ASSERT_TRUE(body.has_value());
  const auto samples = parse_samples(*body);
  ASSERT_GT(samples.size(), 20u);
  for (const auto& s : samples) {
    const auto it = s.labels.find("model_name");
    ASSERT_TRUE(it != s.labels.end()) << s.name;
    EXPECT_EQ(it->second, s.name == "baton_test_own_model" ? "other" : "served-name") << s.name;
  }
  const PromtoolResult lint = promtool_check(*body);
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
}

// A scrape that finds the engine busy (no snapshot in time) exports the last one with its age, so
// no node series drops out of a scrape under load.
TEST(Metrics, ABusyEngineExportsTheLastSnapshotWithItsAge) {
  auto server = metrics::MetricsServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto busy = std::make_shared<std::atomic<bool>>(false);
  (*server)->add(std::make_shared<metrics::NodeCollector>([busy]() -> std::optional<node::v1::NodeInfo> {
    if (busy->load()) return std::nullopt;
    return decode_info();
  }));
  const std::map<std::string, std::string> node = {{"node", "127.0.0.1:7000"}};
  auto fresh = scrape((*server)->address());
  ASSERT_TRUE(fresh.has_value());
  const auto before = parse_samples(*fresh);
  EXPECT_EQ(sum_of(before, metrics::kNodeSnapshotAge, node), 0);
  busy->store(true);
  auto stale = scrape((*server)->address());
  ASSERT_TRUE(stale.has_value());
  const auto after = parse_samples(*stale);
  for (const char* name : {metrics::kSpecDrafts, metrics::kRequestsRunning, metrics::kKvBlocks, metrics::kSpecAcceptedPerPos}) {
    EXPECT_EQ(count_of(after, name), count_of(before, name)) << name;
    EXPECT_EQ(sum_of(after, name, node), sum_of(before, name, node)) << name;
  }
  EXPECT_GT(sum_of(after, metrics::kNodeSnapshotAge, node), 0);
  const PromtoolResult lint = promtool_check(*stale);
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
}

TEST(Metrics, RequestAndTransferInstrumentsPassPromtool) {
  auto server = metrics::MetricsServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  metrics::RequestMetrics requests((*server)->registry(), "127.0.0.1:50051");
  metrics::RequestObservation r;
  r.method = "ngram";
  r.finished_reason = "length";
  r.got_first_token = true;
  r.ttft_s = 0.02;
  r.e2e_s = 0.32;
  r.output_tokens = 4;  // TPOT (0.32 - 0.02) / 3 = 0.1 s
  r.inter_token_s = {0.1, 0.2};
  requests.observe(r);
  metrics::KvTransferMetrics transfers((*server)->registry(), {{"method", "ngram"}, {"role", "prefill"}, {"node", "p"}});
  transfers.succeeded(0.004);
  transfers.failed("commit");
  auto body = scrape((*server)->address());
  ASSERT_TRUE(body.has_value());
  const auto samples = parse_samples(*body);
  EXPECT_EQ(sum_of(samples, std::string(metrics::kTimeToFirstToken) + "_count", {{"method", "ngram"}}), 1);
  EXPECT_NEAR(sum_of(samples, std::string(metrics::kTimePerOutputToken) + "_sum"), 0.1, 1e-12);
  EXPECT_EQ(sum_of(samples, std::string(metrics::kInterTokenLatency) + "_count"), 2);
  EXPECT_EQ(sum_of(samples, metrics::kRequestSuccess, {{"finished_reason", "length"}}), 1);
  EXPECT_EQ(sum_of(samples, metrics::kKvTransferFailures, {{"stage", "commit"}}), 1);
  EXPECT_EQ(sum_of(samples, metrics::kKvTransferFailures, {{"stage", "begin"}}), 0);
  EXPECT_EQ(sum_of(samples, std::string(metrics::kKvTransferSeconds) + "_count"), 1);
  const PromtoolResult lint = promtool_check(*body);
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
}

TEST(Metrics, PortInUseIsAClearError) {
  auto first = metrics::MetricsServer::start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string port = (*first)->address().substr((*first)->address().rfind(':') + 1);
  auto second = metrics::MetricsServer::start("127.0.0.1", std::stoi(port));
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("metrics endpoint on 127.0.0.1:" + port));
}

TEST(Metrics, TargetsFileIsPrometheusFileSd) {
  const auto path = std::filesystem::temp_directory_path() / ("targets_" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(metrics::write_targets_file(path.string(), {{"127.0.0.1:9001", "decode", "127.0.0.1:7000"},
                                                          {"127.0.0.1:9002", "router", "127.0.0.1:50051"}})
                  .ok());
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["targets"][0], "127.0.0.1:9001");
  EXPECT_EQ(j[0]["labels"]["role"], "decode");
  EXPECT_EQ(j[1]["labels"]["node"], "127.0.0.1:50051");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace baton::testing
