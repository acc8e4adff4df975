// `baton bench serve`'s pieces that need no server: percentiles and the summary (TPOT, ITL,
// goodput, acceptance), flag parsing of goodput targets, Poisson arrivals, the prompt sets, and
// the gnuplot script.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "cli/serve_dataset.h"
#include "cli/serve_metrics.h"
#include "cli/serve_plot.h"
#include "cli/serve_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::cli {
namespace {

using ::testing::HasSubstr;

TEST(ServeMetrics, PercentileInterpolatesBetweenOrderStatistics) {
  // numpy.percentile([1, 2, 3, 4], q): q=50 -> 2.5, q=90 -> 3.7, q=0 -> 1, q=100 -> 4.
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 90), 3.7, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

ServeResult result(double ttft, std::vector<double> chunks, double e2e, std::int64_t out) {
  ServeResult r;
  r.ok = true;
  r.ttft_s = ttft;
  r.chunk_times = std::move(chunks);
  r.e2e_s = e2e;
  r.prompt_tokens = 10;
  r.output_tokens = out;
  return r;
}

TEST(ServeMetrics, SummaryComputesTpotItlThroughputAndGoodput) {
  std::vector<ServeResult> rs;
  rs.push_back(result(0.1, {0.1, 0.3, 0.5}, 0.5, 5));  // TPOT (0.5 - 0.1) / 4 = 0.1 s
  rs.push_back(result(0.2, {0.2, 0.4}, 0.4, 3));       // TPOT 0.1 s
  rs.push_back(result(1.0, {1.0}, 1.0, 1));            // one token: no TPOT
  ServeResult failed;
  failed.error = "boom";
  rs.push_back(failed);
  GoodputTargets targets;
  targets.ttft_ms = 500;
  const ServeSummary s = summarize(rs, 2.0, targets);
  EXPECT_EQ(s.completed, 3u);
  EXPECT_EQ(s.failed, 1u);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0], "boom");
  EXPECT_EQ(s.total_output_tokens, 9);
  EXPECT_EQ(s.total_input_tokens, 30);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 4.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 19.5);
  EXPECT_EQ(s.tpot.count, 2u);
  EXPECT_NEAR(s.tpot.mean_ms, 100, 1e-9);
  EXPECT_EQ(s.itl.count, 3u);  // gaps 0.2, 0.2 and 0.2
  EXPECT_NEAR(s.itl.p99_ms, 200, 1e-9);
  EXPECT_EQ(s.ttft.count, 3u);
  EXPECT_NEAR(s.ttft.p50_ms, 200, 1e-9);
  ASSERT_TRUE(s.goodput.has_value());
  EXPECT_DOUBLE_EQ(*s.goodput, 1.0);  // two of three met TTFT <= 500 ms, over 2 s
  EXPECT_FALSE(s.acceptance_rate.has_value());
}

TEST(ServeMetrics, AcceptanceFromTheServersCounts) {
  ServeResult r = result(0.1, {0.1, 0.2}, 0.2, 9);
  r.num_drafts = 2;
  r.num_draft_tokens = 8;
  r.num_accepted_tokens = 6;
  const ServeSummary s = summarize({r}, 1.0, {});
  EXPECT_DOUBLE_EQ(*s.acceptance_rate, 0.75);
  EXPECT_DOUBLE_EQ(*s.mean_acceptance_length, 4.0);
  EXPECT_FALSE(s.goodput.has_value());
  EXPECT_THAT(summary_table(s), HasSubstr("Mean acceptance length:"));
  const auto j = summary_json(s);
  EXPECT_TRUE(j["request_rate"].is_null());  // infinite rate
  EXPECT_DOUBLE_EQ(j["acceptance_rate"].get<double>(), 0.75);
}

TEST(ServeMetrics, GoodputSpecParsesAndRejectsWithTheItemNamed) {
  auto t = parse_goodput("ttft:500,tpot:50 e2el:2000");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->ttft_ms, 500);
  EXPECT_EQ(*t->tpot_ms, 50);
  EXPECT_EQ(*t->e2el_ms, 2000);
  EXPECT_THAT(std::string(parse_goodput("latency:5").status().message()), HasSubstr("latency"));
  EXPECT_THAT(std::string(parse_goodput("ttft:-1").status().message()), HasSubstr("ttft:-1"));
  EXPECT_FALSE(parse_goodput("").ok());
}

TEST(ServeRunner, PoissonArrivalsHaveTheRatesMeanGap) {
  const auto at = poisson_arrivals(20000, 4.0, 7);
  ASSERT_EQ(at.size(), 20000u);
  EXPECT_EQ(at[0], 0);
  for (std::size_t i = 1; i < at.size(); ++i) ASSERT_GE(at[i], at[i - 1]);
  const double mean_gap = at.back() / static_cast<double>(at.size() - 1);
  EXPECT_NEAR(mean_gap, 0.25, 0.25 * 0.05);  // 20000 exponential gaps: sd of the mean ~0.7%
  EXPECT_EQ(poisson_arrivals(20000, 4.0, 7), at);  // seeded
  for (double t : poisson_arrivals(5, std::numeric_limits<double>::infinity(), 7)) EXPECT_EQ(t, 0);
}

TEST(ServeDataset, LoadsTheBundledPromptSets) {
  DatasetOptions o;
  o.num_prompts = 200;  // HumanEval has 164: prompts repeat
  auto he = load_serve_prompts(o);
  ASSERT_TRUE(he.ok()) << he.status();
  ASSERT_EQ(he->size(), 200u);
  EXPECT_THAT((*he)[0].text, HasSubstr("def has_close_elements"));
  EXPECT_EQ((*he)[164].text, (*he)[0].text);
  EXPECT_FALSE((*he)[0].chat);

  o.dataset = "spec-bench";
  o.num_prompts = 3;
  auto sb = load_serve_prompts(o);
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_TRUE((*sb)[0].chat);
  EXPECT_THAT((*sb)[0].text, HasSubstr("Hawaii"));

  o.dataset = "random";
  o.vocab_size = 50;
  o.random_input_len = 17;
  auto rnd = load_serve_prompts(o);
  ASSERT_TRUE(rnd.ok()) << rnd.status();
  for (const auto& p : *rnd) {
    ASSERT_EQ(p.token_ids.size(), 17u);
    for (auto id : p.token_ids) ASSERT_TRUE(id >= 0 && id < 50);
  }
}

TEST(ServeDataset, BadFilesNameTheFileAndLine) {
  const auto dir = std::filesystem::temp_directory_path() / ("serve_dataset_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "bad.jsonl").string();
  std::ofstream(path) << "{\"prompt\": \"ok\"}\n{\"text\": 3}\n";
  DatasetOptions o;
  o.dataset = "jsonl";
  o.path = path;
  auto r = load_serve_prompts(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(path + ":2"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("\"prompt\""));
  o.path = (dir / "missing.jsonl").string();
  EXPECT_EQ(load_serve_prompts(o).status().code(), absl::StatusCode::kNotFound);
  o.dataset = "sharegpt";
  EXPECT_THAT(std::string(load_serve_prompts(o).status().message()), HasSubstr("sharegpt"));
  std::filesystem::remove_all(dir);
}

TEST(ServePlot, ScriptCarriesEveryRunsPercentiles) {
  ServeSummary a, b;
  a.request_rate = 2;
  a.ttft.p50_ms = 11;
  a.tpot.p99_ms = 33;
  b.request_rate = std::numeric_limits<double>::infinity();
  b.request_throughput = 5.5;  // plotted at the achieved rate
  const std::string script = latency_plot_script({a, b}, "/tmp/x'y.png");
  EXPECT_THAT(script, HasSubstr("set output '/tmp/x''y.png'"));
  EXPECT_THAT(script, HasSubstr("\n2 11 0 0 0 0 33 \"\"\n"));
  // The unlimited run is labelled where it is drawn.
  EXPECT_THAT(script, HasSubstr("\n5.5 0 0 0 0 0 0 \"all at once\"\n"));
  EXPECT_THAT(script, HasSubstr("using 1:4:8 with labels"));
}

}  // namespace
}  // namespace baton::cli
