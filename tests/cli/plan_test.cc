// baton plan's profile, simulator and search (cli/plan_profile.h, plan_sim.h, plan_search.h) on hand-made profiles
// whose answers are worked out here from the model's rules, not taken from the code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "cli/plan_profile.h"
#include "cli/plan_search.h"
#include "cli/plan_sim.h"
#include "cli/plan_trace.h"

namespace baton::cli {
namespace {

// Prefill: 1 ms per prompt token at any batch (batch 1 and 4 measured). Decode: 20 ms a step at
// batch 1 and 30 ms at batch 2 (k 0 and 2). KV: 1 MB a token at 1 GB/s over 10 layers, 1 ms
// latency. 5 ms fixed per request.
DeploymentProfile test_profile() {
  DeploymentProfile p;
  p.model = "m";
  p.threads = 1;
  p.num_layers = 10;
  p.max_num_seqs = 8;
  p.max_num_batched_tokens = 100;
  for (int b : {1, 4}) {
    p.prefill.push_back({b, 100, 0.100 * b});
    p.prefill.push_back({b, 200, 0.200 * b});
  }
  for (int k : {0, 2}) {
    p.decode.push_back({k, 1, 0.020});
    p.decode.push_back({k, 2, 0.030});
  }
  p.acceptance = {1.0, 1.0};
  p.kv_bytes_per_token = 1e6;
  p.kv_gbps = 1.0;
  p.kv_latency_s = 0.001;
  p.request_overhead_s = 0.005;
  return p;
}

SimulationResult run(const DeploymentProfile& p, const std::vector<TraceRequest>& trace, Candidate c) {
  auto sim = simulate(p, trace, c);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *sim : SimulationResult{};
}

TEST(PlanProfile, InterpolatesAndExtrapolates) {
  const DeploymentProfile p = test_profile();
  EXPECT_NEAR(p.prefill_seconds(1, 150), 0.150, 1e-12);
  EXPECT_NEAR(p.prefill_seconds(1, 400), 0.400, 1e-12);  // linear past the last length
  EXPECT_NEAR(p.prefill_seconds(2, 100), 0.200, 1e-12);  // between batch 1 and 4
  EXPECT_NEAR(p.prefill_seconds(8, 100), 0.800, 1e-12);  // past batch 4: by tokens
  EXPECT_NEAR(*p.decode_step_seconds(0, 3), 0.040, 1e-12);
  EXPECT_EQ(p.decode_step_seconds(1, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_DOUBLE_EQ(p.expected_tokens_per_step(2), 3.0);
  EXPECT_EQ(p.measured_ks(), (std::vector<int>{0, 2}));
}

TEST(PlanProfile, JsonRoundTripAndErrors) {
  const DeploymentProfile p = test_profile();
  auto back = profile_from_json(profile_to_json(p), "profile.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->prefill.size(), p.prefill.size());
  EXPECT_NEAR(back->prefill_seconds(1, 150), 0.150, 1e-12);

  nlohmann::json j = profile_to_json(p);
  j.erase("kv_gbps");
  EXPECT_THAT(std::string(profile_from_json(j, "profile.json").status().message()),
              ::testing::HasSubstr("profile.json: missing `kv_gbps`"));
  j = profile_to_json(p);
  j["acceptance"] = {1.5, 0.5};
  EXPECT_THAT(std::string(profile_from_json(j, "profile.json").status().message()), ::testing::HasSubstr("not in [0, 1]"));
  j = profile_to_json(p);
  j["acceptance"] = {0.5};  // k = 2 measured with one position
  EXPECT_THAT(std::string(profile_from_json(j, "profile.json").status().message()),
              ::testing::HasSubstr("decode[2]: k = 2 but `acceptance` has only 1"));
  j = profile_to_json(p);
  j["prefill"][1]["seconds"] = -1;
  EXPECT_THAT(std::string(profile_from_json(j, "profile.json").status().message()),
              ::testing::HasSubstr("prefill[1]: `seconds` must be positive"));
}

TEST(PlanSim, OneRequestFollowsThePath) {
  // 100-token prompt: prefill 0.1 s; KV 100 MB = 0.1 s at 1 GB/s, hidden by the forward except
  // one layer's 0.01 s; + 1 ms latency + 5 ms overhead. Then 10 more tokens at 20 ms a step.
  const auto sim = run(test_profile(), {{0.0, 100, 11}}, {1, 1, 0, 0, 0});
  ASSERT_EQ(sim.requests.size(), 1u);
  EXPECT_NEAR(sim.requests[0].ttft_s, 0.100 + 0.010 + 0.001 + 0.005, 1e-9);
  EXPECT_NEAR(sim.requests[0].e2e_s - sim.requests[0].ttft_s, 10 * 0.020, 1e-9);
}

TEST(PlanSim, TransferNotHiddenByAShortForward) {
  DeploymentProfile p = test_profile();
  p.kv_gbps = 0.5;  // 100 MB takes 0.2 s, the forward hides 0.1 s of it
  const auto sim = run(p, {{0.0, 100, 1}}, {1, 1, 0, 0, 0});
  EXPECT_NEAR(sim.requests[0].ttft_s, 0.100 + 0.100 + 0.001 + 0.005, 1e-9);
  EXPECT_NEAR(sim.requests[0].e2e_s, sim.requests[0].ttft_s, 1e-12);  // one token: done at the first
}

TEST(PlanSim, PrefillQueueAndMorePrefillNodes) {
  // Two 100-token prompts at once; the token budget (100) fits one per forward.
  const std::vector<TraceRequest> trace = {{0.0, 100, 2}, {0.0, 100, 2}};
  const auto one = run(test_profile(), trace, {1, 1, 0, 0, 0});
  EXPECT_NEAR(one.requests[0].ttft_s, 0.116, 1e-9);
  EXPECT_NEAR(one.requests[1].ttft_s, 0.216, 1e-9);  // waited for the first forward
  const auto two = run(test_profile(), trace, {2, 1, 0, 0, 0});
  EXPECT_NEAR(two.requests[1].ttft_s, 0.116, 1e-9);
}

TEST(PlanSim, SharedCoresSlowBusyNodesDown) {
  // Two prefill nodes of one thread each on one core: both forwards run at half speed.
  const std::vector<TraceRequest> trace = {{0.0, 100, 1}, {0.0, 100, 1}};
  const auto shared = run(test_profile(), trace, {2, 1, 0, 1, 0});
  EXPECT_NEAR(shared.requests[0].ttft_s, 0.200 + 0.016, 1e-9);
  EXPECT_NEAR(shared.requests[1].ttft_s, 0.200 + 0.016, 1e-9);
  // Two cores: no slowdown.
  const auto enough = run(test_profile(), trace, {2, 1, 0, 2, 0});
  EXPECT_NEAR(enough.requests[1].ttft_s, 0.116, 1e-9);
}

TEST(PlanSim, DecodeBatchesAndDrafts) {
  // Both land together and decode as a batch of 2 (30 ms a step): 9 more tokens, 9 steps at k = 0,
  // 3 steps at k = 2 with every draft accepted (3 tokens a step).
  const std::vector<TraceRequest> trace = {{0.0, 50, 10}, {0.0, 50, 10}};
  DeploymentProfile p = test_profile();
  p.max_num_batched_tokens = 200;  // one forward prefills both
  const auto plain = run(p, trace, {1, 1, 0, 0, 0});
  EXPECT_NEAR(plain.requests[0].e2e_s - plain.requests[0].ttft_s, 9 * 0.030, 1e-9);
  const auto drafted = run(p, trace, {1, 1, 2, 0, 0});
  EXPECT_NEAR(drafted.requests[0].e2e_s - drafted.requests[0].ttft_s, 3 * 0.030, 1e-9);
  // Nothing accepted: one token a step again.
  p.acceptance = {0.0, 0.0};
  const auto rejected = run(p, trace, {1, 1, 2, 0, 0});
  EXPECT_NEAR(rejected.requests[0].e2e_s - rejected.requests[0].ttft_s, 9 * 0.030, 1e-9);
}

TEST(PlanSim, PartialAcceptanceAveragesToTheExpectedTokens) {
  // P(n >= 1) = 0.5, P(n >= 2) = 0.25: 1.75 tokens a step on average. 200 requests, one at a time.
  DeploymentProfile p = test_profile();
  p.acceptance = {0.5, 0.25};
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 200; ++i) trace.push_back({i * 10.0, 10, 701});
  const auto sim = run(p, trace, {1, 1, 2, 0, 7});
  double steps = 0;
  for (const auto& r : sim.requests) steps += (r.e2e_s - r.ttft_s) / 0.020;
  EXPECT_NEAR(700.0 / (steps / 200), 1.75, 0.02);
}

TEST(PlanSim, ColocatedPrefillsInsideDecodeSteps) {
  const auto sim = run(test_profile(), {{0.0, 100, 3}}, {0, 1, 0, 0, 0});
  EXPECT_NEAR(sim.requests[0].ttft_s, 0.100 + 0.005, 1e-9);  // no hand-off
  EXPECT_NEAR(sim.requests[0].e2e_s - sim.requests[0].ttft_s, 2 * 0.020, 1e-9);
}

TEST(PlanSim, RejectsWhatTheProfileCannotDescribe) {
  EXPECT_EQ(simulate(test_profile(), {{0, 10, 2}}, {1, 1, 1, 0, 0}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(simulate(test_profile(), {{0, 10, 2}}, {1, 0, 0, 0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanSearch, PicksTheCheapestDeploymentThatMeetsTheTargets) {
  // A 100-token prompt every 80 ms: one node prefilling (0.1 s a prompt) falls behind, whether a
  // prefill node (P1 D1) or a colocated decode node (P0 D1). Two colocated decode nodes take every
  // other prompt and keep up: TTFT 0.105 s (no hand-off), which meets 150 ms at two nodes, the
  // fewest that can. The search stops at two nodes.
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 30; ++i) trace.push_back({i * 0.08, 100, 2});
  auto result = search_deployments(test_profile(), trace, {150, 100, 90}, {2, 2, {0}, 0});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->tried.size(), 3u);  // P0 D1; P1 D1, P0 D2
  EXPECT_FALSE(result->tried[0].meets);
  EXPECT_FALSE(result->tried[1].meets);
  ASSERT_TRUE(result->best.has_value());
  const Candidate& best = result->tried[*result->best].candidate;
  EXPECT_EQ(best.num_prefill, 0);
  EXPECT_EQ(best.num_decode, 2);
  EXPECT_NEAR(result->tried[*result->best].ttft_ms, 105.0, 1e-6);
}

TEST(PlanSearch, LowestTpotAmongTheCheapestAndNoneWhenUnreachable) {
  // One request: every deployment meets a loose target. At one node (P0 D1) k = 2 with every
  // draft accepted beats k = 0 on TPOT.
  const std::vector<TraceRequest> one = {{0.0, 100, 10}};
  auto loose = search_deployments(test_profile(), one, {1000, 1000, 0}, {1, 1, {0, 2}, 0});
  ASSERT_TRUE(loose.ok()) << loose.status();
  ASSERT_EQ(loose->tried.size(), 2u);
  EXPECT_EQ(loose->tried[*loose->best].candidate.k, 2);
  // A TTFT below the prefill itself: nothing meets it, and everything up to the limits is tried.
  auto tight = search_deployments(test_profile(), one, {50, 1000, 0}, {1, 1, {0, 2}, 0});
  ASSERT_TRUE(tight.ok());
  EXPECT_FALSE(tight->best.has_value());
  EXPECT_EQ(tight->tried.size(), 4u);
  EXPECT_EQ(search_deployments(test_profile(), one, {50, 50, 0}, {1, kMaxPlannedNodesPerPool + 1, {0}, 0})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(search_deployments(test_profile(), one, {50, 50, 0}, {1, 1, {3}, 0}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PlanTrace, ReadsJsonlAndNamesTheBadLine) {
  const std::string path = ::testing::TempDir() + "/trace.jsonl";
  {
    std::ofstream out(path);
    out << R"({"arrival_s": 1.5, "prompt_tokens": 10, "output_tokens": 4})" << "\n\n"
        << R"({"arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 8})" << "\n";
  }
  auto trace = read_trace_jsonl(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_EQ((*trace)[0].prompt_tokens, 20);  // sorted by arrival
  {
    std::ofstream out(path);
    out << R"({"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 4})" << "\n"
        << R"({"arrival_s": 1, "prompt_tokens": 0, "output_tokens": 4})" << "\n";
  }
  EXPECT_THAT(std::string(read_trace_jsonl(path).status().message()),
              ::testing::HasSubstr("trace.jsonl:2: `prompt_tokens` must be an integer"));
  {
    std::ofstream out(path);
    out << R"({"arrival": 1, "prompt_tokens": 10, "output_tokens": 4})" << "\n";
  }
  EXPECT_THAT(std::string(read_trace_jsonl(path).status().message()), ::testing::HasSubstr("unknown key `arrival`"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace baton::cli
