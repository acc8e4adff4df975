// A real Prometheus (Debian's `prometheus`) scraping a real local cluster through the file_sd
// targets file `baton up --prometheus-targets` writes, while requests flow: every panel query of
// the Grafana dashboard (deploy/k8s/helm/baton/dashboards/baton.json) returns data through Prometheus's HTTP API.
// The cluster drafts with the suffix method through a proposer sidecar, so the sidecar's series
// exist too. Then, under 16 concurrent streams for a minute, no scrape of a node lacks its series,
// and every series carries model_name.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "metrics/targets_file.h"
#include "tests/metrics/metrics_support.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct PanelQuery {
  std::string panel, expr;
};

// Every target expression of the dashboard, with Grafana's variables as Grafana would expand them
// for "All" over a short range.
std::vector<PanelQuery> dashboard_queries() {
  std::ifstream in(std::string(BATON_SOURCE_DIR) + "/deploy/k8s/helm/baton/dashboards/baton.json");
  const auto dash = nlohmann::json::parse(in);
  std::vector<PanelQuery> out;
  for (const auto& panel : dash["panels"]) {
    for (const auto& target : panel["targets"]) {
      std::string e = target["expr"].get<std::string>();
      e = std::regex_replace(e, std::regex(R"(\$__rate_interval)"), "15s");
      e = std::regex_replace(e, std::regex(R"(\$(method|node|model_name|namespace|release|pod)\b)"), ".*");
      out.push_back({panel["title"].get<std::string>(), e});
    }
  }
  return out;
}

// True when the instant query answers with at least one finite value.
bool has_data(httplib::Client& prometheus, const std::string& expr, std::string* last) {
  auto res = prometheus.Get("/api/v1/query", httplib::Params{{"query", expr}}, httplib::Headers{});
  if (!res || res->status != 200) {
    *last = res ? res->body : "no answer";
    return false;
  }
  *last = res->body;
  const auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return false;
  for (const auto& series : j["data"]["result"]) {
    const double v = std::stod(series["value"][1].get<std::string>());
    if (std::isfinite(v)) return true;
  }
  return false;
}

// An instant query's values by the `node` label (empty on any error).
std::map<std::string, double> by_node(httplib::Client& prometheus, const std::string& expr) {
  std::map<std::string, double> out;
  auto res = prometheus.Get("/api/v1/query", httplib::Params{{"query", expr}}, httplib::Headers{});
  if (!res || res->status != 200) return out;
  const auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return out;
  for (const auto& series : j["data"]["result"]) {
    out[series["metric"].value("node", "")] = std::stod(series["value"][1].get<std::string>());
  }
  return out;
}

TEST(Prometheus, EveryDashboardPanelHasDataFromARealScrape) {
  const auto queries = dashboard_queries();
  ASSERT_GE(queries.size(), 10u);

  cli::ClusterOptions options =
      cluster_options(R"({"method":"suffix","num_speculative_tokens":4,"proposer_budget_ms":200})", "ucx", "prometheus");
  options.proposer_sidecar = true;
  options.metrics = true;
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  const auto dir = std::filesystem::path(options.log_dir) / "prometheus";
  std::filesystem::create_directories(dir);
  const std::string targets = (dir / "targets.json").string();
  ASSERT_TRUE(metrics::write_targets_file(targets, (*cluster)->scrape_targets()).ok());
  std::ofstream(dir / "prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                        << "scrape_configs:\n  - job_name: baton\n    honor_labels: true\n"
                                        << "    file_sd_configs:\n      - files: ['" << targets
                                        << "']\n        refresh_interval: 1s\n";
  const int port = free_port();
  auto prometheus = Subprocess::start({{"/usr/bin/prometheus", "--config.file=" + (dir / "prometheus.yml").string(),
                                        "--storage.tsdb.path=" + (dir / "data").string(),
                                        "--web.listen-address=127.0.0.1:" + std::to_string(port)},
                                       (dir / "prometheus.log").string()});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  auto ready = (*prometheus)->wait_for_line("Server is ready to receive web requests", std::chrono::seconds(60));
  ASSERT_TRUE(ready.ok()) << ready.status();

  // Traffic until the queries are answered: a few requests at a time, each its own stream.
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0}, failed{0};
  std::thread traffic([&] {
    auto stub = v1::Baton::NewStub(grpc::CreateChannel((*cluster)->router_address(), grpc::InsecureChannelCredentials()));
    for (int i = 0; !stop.load(); ++i) {
      v1::GenerateRequest req;
      req.set_text(code_prompts()[static_cast<std::size_t>(i) % code_prompts().size()]);
      req.mutable_sampling()->set_max_tokens(24);
      req.mutable_sampling()->set_temperature(0);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      auto reader = stub->Generate(&ctx, req);
      v1::GenerateResponse m;
      while (reader->Read(&m)) {
      }
      (reader->Finish().ok() ? completed : failed).fetch_add(1);
    }
  });

  httplib::Client client("http://127.0.0.1:" + std::to_string(port));
  client.set_read_timeout(10);
  std::vector<bool> answered(queries.size(), false);
  std::vector<std::string> last(queries.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  std::size_t remaining = queries.size();
  while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < queries.size(); ++i) {
      if (!answered[i] && has_data(client, queries[i].expr, &last[i])) {
        answered[i] = true;
        --remaining;
      }
    }
    // Polling a condition with a deadline: Prometheus scrapes every second.
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  stop = true;
  traffic.join();
  EXPECT_GT(completed.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  for (std::size_t i = 0; i < queries.size(); ++i) {
    EXPECT_TRUE(answered[i]) << "panel \"" << queries[i].panel << "\": " << queries[i].expr << "\nlast answer: " << last[i];
  }
  // Every process was scraped, with the labels the targets file gave it.
  std::string up;
  EXPECT_TRUE(has_data(client, "count(up{job=\"baton\"} == 1) == 4", &up)) << up;

  // Under load (16 concurrent streams for 60 s) every scrape of a node still has its series: an
  // autoscaler reading them sees no gap. Compared per node: scrapes (up samples) against samples
  // of the node's series over the same window.
  constexpr int kStreams = 16;
  constexpr auto kLoad = std::chrono::seconds(60);
  std::atomic<bool> stop_load{false};
  std::atomic<int> load_failed{0};
  std::vector<std::thread> streams;
  for (int s = 0; s < kStreams; ++s) {
    streams.emplace_back([&, s] {
      auto stub = v1::Baton::NewStub(grpc::CreateChannel((*cluster)->router_address(), grpc::InsecureChannelCredentials()));
      for (int i = s; !stop_load.load(); i += kStreams) {
        v1::GenerateRequest req;
        req.set_text(code_prompts()[static_cast<std::size_t>(i) % code_prompts().size()]);
        req.mutable_sampling()->set_max_tokens(32);
        req.mutable_sampling()->set_temperature(0);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        auto reader = stub->Generate(&ctx, req);
        v1::GenerateResponse m;
        while (reader->Read(&m)) {
        }
        if (!reader->Finish().ok()) load_failed.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(kLoad);  // the load's duration itself, not a synchronisation
  const std::string window = "[" + std::to_string(kLoad.count()) + "s]";
  const std::string nodes = "up{job=\"baton\", role=~\"prefill|decode|both\"}" + window;
  const auto attempts = by_node(client, "sum by (node) (count_over_time(" + nodes + "))");
  const auto answered_scrapes = by_node(client, "sum by (node) (sum_over_time(" + nodes + "))");  // up is 1 or 0
  stop_load = true;
  for (std::thread& t : streams) t.join();
  EXPECT_EQ(load_failed.load(), 0);
  ASSERT_EQ(attempts.size(), 2u) << "one prefill and one decode node";
  for (const auto& [node, n] : attempts) {
    EXPECT_GE(n, 30) << node << " was scraped too rarely to mean anything";
    // A scrape Prometheus itself gave up on (its 1 s timeout on a loaded 2-core machine) is not the
    // node dropping series; the node must answer nearly all of them, and every answer must be whole.
    EXPECT_GE(answered_scrapes.count(node) ? answered_scrapes.at(node) : 0.0, 0.9 * n) << node << " failed too many scrapes";
  }
  for (const char* series : {"baton_num_requests_running", "baton_num_requests_waiting", "baton_queued_prefill_tokens",
                             "baton_kv_cache_usage_perc", "baton_generation_tokens_total"}) {
    // One sample per answered scrape (the KV usage: one per pool; the target pool is enough).
    const std::string selector = std::string(series) + (std::string(series) == "baton_kv_cache_usage_perc" ? "{pool=\"target\"}" : "");
    const auto samples = by_node(client, "sum by (node) (count_over_time(" + selector + window + "))");
    for (const auto& [node, n] : answered_scrapes) {
      EXPECT_EQ(samples.count(node) ? samples.at(node) : 0.0, n) << series << " on " << node << ": an answered scrape lacked it";
    }
  }
  // vLLM's model_name label is on every Baton series of every process.
  std::string unlabelled;
  EXPECT_FALSE(has_data(client, "count by (__name__, role) ({__name__=~\"baton_.+\", model_name=\"\"})", &unlabelled))
      << unlabelled;
}

}  // namespace
}  // namespace baton::testing
