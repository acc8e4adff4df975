// `baton verify-lossless` against real clusters (router, prefill and decode
// processes on loopback, started by cli/cluster.h as `baton up` starts them):
// it passes against a correct deployment drafting with the bundled EAGLE-3 head
// (k = 4, the `baton up` default), and fails against one whose decode node runs
// the deliberately broken rejection sampler
// (--testing-broken-rejection-sampler) — in both of its checks, each on its
// own.
//
// Power: the broken sampler accepts drafts twice too eagerly and redraws
// rejected positions from p, which moves a large share of the mass at the 2nd
// and 3rd generated tokens. Its chi-square p-value was below 1e-28 with 200
// samples per side for each of 5 seeds tried, and below 1e-46 with 300 for each
// of 8; the 150 used here keep each test under a minute and the p-value far
// below alpha 1e-3.
#include <fstream>

#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

std::string eagle3_k4() {
  return R"({"method":"eagle3","model":")" + family_path("eagle3") + R"(","num_speculative_tokens":4})";
}

struct Verdict {
  int exit_code = 0;
  std::string output;
  nlohmann::json report;
};

// Runs the real `baton verify-lossless` against the cluster; the JSON report
// comes from --json.
Verdict verify(const cli::LocalCluster& cluster, const std::string& name) {
  const std::string json_path = cluster_options(std::nullopt, "ucx", name).log_dir + "-report.json";
  std::vector<std::string> argv = {BATON_CLI_PATH,  "verify-lossless",
                                   "--endpoint",    cluster.router_address(),
                                   "--num-prompts", "8",
                                   "--max-tokens",  "32",
                                   "--samples",     "150",
                                   "--json",        json_path};
  Verdict v;
  std::tie(v.exit_code, v.output) = run_to_exit(argv);
  std::ifstream in(json_path);
  v.report = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::filesystem::remove(json_path);
  return v;
}

TEST(VerifyLossless, PassesAgainstACorrectCluster) {
  auto cluster = cli::LocalCluster::start(cluster_options(eagle3_k4(), "ucx", "verify-ok"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const Verdict v = verify(**cluster, "verify-ok");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_THAT(v.output, ::testing::HasSubstr("PASS"));
  // It says how far it is while it runs (8 prompts on and off; 4 sample prompts x 150 x 2).
  EXPECT_THAT(v.output, ::testing::HasSubstr("greedy: 16/16 requests done (100 %)"));
  EXPECT_THAT(v.output, ::testing::HasSubstr("sampled: 1200/1200 requests done (100 %)"));
  EXPECT_THAT(v.output, ::testing::HasSubstr("sampled: 120/1200 requests done (10 %)"));
  EXPECT_THAT(v.output, ::testing::ContainsRegex("accepted \\(acceptance rate [0-9]+\\.[0-9][0-9] %\\)"));
  ASSERT_TRUE(v.report.is_object()) << v.output;
  EXPECT_EQ(v.report["verdict"], "PASS");
  EXPECT_EQ(v.report["greedy"]["prompts_compared"].get<int>() + v.report["greedy"]["prompts_skipped"].get<int>(), 8);
  EXPECT_GE(v.report["greedy"]["prompts_compared"].get<int>(), 6);
  EXPECT_EQ(v.report["greedy"]["mismatched_prompts"], 0);
  EXPECT_GE(v.report["sampled"]["p_value"].get<double>(), 1e-3);
  EXPECT_GT(v.report["sampled"]["dof"].get<int>(), 4) << "the sampled check had too few bins to mean anything";
  // Speculation really ran with it on, and really did not with it off.
  EXPECT_GT(v.report["speculation"]["num_accepted_tokens"].get<std::int64_t>(), 0);
  EXPECT_EQ(v.report["speculation"]["draft_tokens_without_speculation"], 0);
}

TEST(VerifyLossless, FailsAgainstABrokenRejectionSampler) {
  auto options = cluster_options(eagle3_k4(), "ucx", "verify-broken");
  options.decode_binary = "baton-decode-testing";
  options.decode_args = {"--testing-broken-rejection-sampler"};
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const Verdict v = verify(**cluster, "verify-broken");
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_THAT(v.output, ::testing::HasSubstr("FAIL"));
  ASSERT_TRUE(v.report.is_object()) << v.output;
  EXPECT_EQ(v.report["verdict"], "FAIL");
  // Each check catches it on its own.
  EXPECT_GT(v.report["greedy"]["mismatched_prompts"].get<int>(), 0);
  EXPECT_FALSE(v.report["greedy"]["first_mismatch"].is_null());
  EXPECT_LT(v.report["sampled"]["p_value"].get<double>(), 1e-3);
}

// Entropy verification, given as vLLM Ascend spells it (--additional-config on every node): lossy by
// design, so the verdict is FAIL from the configuration and from the responses marked lossy, while
// greedy output (which entropy verification leaves alone) still matches.
TEST(VerifyLossless, FailsAgainstEntropyVerification) {
  auto options = cluster_options(eagle3_k4(), "ucx", "verify-entropy");
  options.node_args.insert(options.node_args.end(),
                           {"--additional-config",
                            R"({"rejection_sampler_config": {"enable_entropy_verify": true, "posterior_alpha": 1.0}})"});
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const Verdict v = verify(**cluster, "verify-entropy");
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_THAT(v.output, ::testing::HasSubstr("lossy by design"));
  ASSERT_TRUE(v.report.is_object()) << v.output;
  EXPECT_EQ(v.report["verdict"], "FAIL");
  EXPECT_THAT(v.report["failures"].dump(), ::testing::HasSubstr("configured lossy (entropy verification"));
  EXPECT_GT(v.report["speculation"]["lossy_responses"].get<std::int64_t>(), 0);
  EXPECT_EQ(v.report["greedy"]["mismatched_prompts"], 0);
}

// No router there: a clear error at once, with the status by name, and no verdict about speculation.
TEST(VerifyLossless, AnUnreachableRouterIsAClearErrorNotAVerdict) {
  const auto [code, output] = run_to_exit({BATON_CLI_PATH, "verify-lossless", "--endpoint", "127.0.0.1:1"});
  EXPECT_EQ(code, 1);
  EXPECT_NE(output.find("cannot reach the router: UNAVAILABLE"), std::string::npos) << output;
  EXPECT_EQ(output.find("no speculation configured"), std::string::npos) << output;
  EXPECT_EQ(output.find("gRPC 14"), std::string::npos) << output;
}

TEST(VerifyLossless, UsageErrorsExitWithTwo) {
  EXPECT_EQ(run_to_exit({BATON_CLI_PATH, "verify-lossless"}).first,
            2);  // no --endpoint
  EXPECT_EQ(run_to_exit({BATON_CLI_PATH, "verify-lossless", "--endpoint", "127.0.0.1:1", "--alpha", "2"}).first, 2);
  EXPECT_EQ(
      run_to_exit({BATON_CLI_PATH, "verify-lossless", "--endpoint", "127.0.0.1:1", "--prompts", "/nonexistent"}).first,
      2);
}

}  // namespace
}  // namespace baton::testing
