// `baton bench serve` as a real process against a real local cluster (router, prefill and decode
// nodes with EAGLE-3 speculation): every request completes, the token counts add up, the
// speculation counts come back from the server, --json and --plot write their files, and bad
// flags or an unreachable endpoint fail with a message.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

CliRun run_baton(const std::vector<std::string>& args, const std::filesystem::path& dir) {
  std::string cmd = std::string(BATON_BINARY_DIR) + "/cli/baton";
  for (const std::string& a : args) cmd += " '" + a + "'";
  const auto err_path = dir / "stderr.txt";
  cmd += " 2>'" + err_path.string() + "'";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

class BenchServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("bench_serve_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(BenchServeTest, ReportsEveryRequestAndTheServersAcceptance) {
  const SpecCase eagle3 = family_methods()[4];
  ASSERT_EQ(eagle3.label, "eagle3");
  auto cluster = cli::LocalCluster::start(cluster_options(eagle3.config, "ucx", "bench-serve"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string json_path = (dir_ / "results.json").string();
  const std::string png_path = (dir_ / "latency.png").string();
  constexpr int kPrompts = 6, kMaxTokens = 12;
  CliRun r = run_baton({"bench", "serve", "--endpoint", (*cluster)->router_address(), "--num-prompts",
                     std::to_string(kPrompts), "--max-tokens", std::to_string(kMaxTokens), "--ignore-eos",
                     "--request-rate", "20,inf", "--max-concurrency", "4", "--goodput", "ttft:60000",
                     "--json", json_path, "--plot", png_path},
                    dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Serving Benchmark Result"));
  EXPECT_THAT(r.out, HasSubstr("Mean acceptance length:"));
  EXPECT_THAT(r.err, HasSubstr("/" + std::to_string(kPrompts)));  // the progress bar

  std::ifstream in(json_path);
  const auto runs = nlohmann::json::parse(in);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_DOUBLE_EQ(runs[0]["request_rate"].get<double>(), 20.0);
  EXPECT_TRUE(runs[1]["request_rate"].is_null());
  for (const auto& run : runs) {
    EXPECT_EQ(run["completed"].get<int>(), kPrompts);
    EXPECT_EQ(run["failed"].get<int>(), 0);
    EXPECT_EQ(run["max_concurrency"].get<int>(), 4);
    // --ignore-eos: every request produced exactly max-tokens tokens, as the server counted them.
    EXPECT_EQ(run["total_output_tokens"].get<int>(), kPrompts * kMaxTokens);
    EXPECT_GT(run["total_input_tokens"].get<int>(), kPrompts);
    EXPECT_EQ(run["ttft"]["count"].get<int>(), kPrompts);
    EXPECT_LE(run["ttft"]["p50_ms"].get<double>(), run["ttft"]["p99_ms"].get<double>());
    EXPECT_GT(run["tpot"]["mean_ms"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(run["goodput"].get<double>(), run["request_throughput"].get<double>());
    // The first token comes from prefill; EAGLE-3 drafts for the rest.
    EXPECT_GT(run["num_draft_tokens"].get<int>(), 0);
    const double rate = run["acceptance_rate"].get<double>();
    EXPECT_TRUE(rate >= 0 && rate <= 1) << rate;
    EXPECT_GE(run["mean_acceptance_length"].get<double>(), 1.0);
  }
  std::ifstream png(png_path, std::ios::binary);
  std::array<char, 8> magic{};
  png.read(magic.data(), magic.size());
  EXPECT_EQ(std::string(magic.data() + 1, 3), "PNG");
}

TEST_F(BenchServeTest, DrivesTheOpenAiHttpApiAndRandomTokenPrompts) {
  cli::ClusterOptions options = cluster_options(std::nullopt, "ucx", "bench-serve-http");
  options.http_port = 0;
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string json_path = (dir_ / "http.json").string();
  constexpr int kPrompts = 4, kMaxTokens = 8;
  CliRun r = run_baton({"bench", "serve", "--base-url", (*cluster)->router_http_url(), "--num-prompts",
                        std::to_string(kPrompts), "--max-tokens", std::to_string(kMaxTokens), "--ignore-eos",
                        "--no-progress", "--json", json_path},
                       dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto run = nlohmann::json::parse(std::ifstream(json_path))[0];
  EXPECT_EQ(run["completed"].get<int>(), kPrompts);
  EXPECT_EQ(run["total_output_tokens"].get<int>(), kPrompts * kMaxTokens);  // usage from the stream's last chunk
  EXPECT_GT(run["total_input_tokens"].get<int>(), kPrompts);
  EXPECT_EQ(run["num_draft_tokens"].get<int>(), 0);  // no speculation in this cluster
  EXPECT_TRUE(run["acceptance_rate"].is_null());
  EXPECT_EQ(r.err.find("["), std::string::npos);  // --no-progress

  // Random prompts are token ids of the requested length, as the server counts them.
  r = run_baton({"bench", "serve", "--endpoint", (*cluster)->router_address(), "--dataset", "random",
                 "--random-input-len", "24", "--num-prompts", "3", "--max-tokens", "4", "--ignore-eos", "--json",
                 json_path},
                dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  run = nlohmann::json::parse(std::ifstream(json_path))[0];
  EXPECT_EQ(run["total_input_tokens"].get<int>(), 3 * 24);
  EXPECT_EQ(run["total_output_tokens"].get<int>(), 3 * 4);
}

TEST_F(BenchServeTest, BadFlagsAndAnUnreachableEndpointFailWithAMessage) {
  CliRun r = run_baton({"bench", "serve", "--endpoint", "127.0.0.1:1", "--request-rate", "fast"}, dir_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--request-rate: 'fast'"));
  r = run_baton({"bench", "serve"}, dir_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--endpoint"));
  r = run_baton({"bench", "serve", "--endpoint", "127.0.0.1:1", "--num-prompts", "2"}, dir_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("GetModelInfo"));
}

}  // namespace
}  // namespace baton::testing
