// The proposer sidecar end to end: a LocalCluster started as `baton up --proposer-sidecar` starts
// it (one baton-proposer, one prefill node, two decode nodes, the router), real processes on
// loopback. Greedy output equals the real `baton generate` binary's with the same method; the
// sidecar is SIGKILLed while requests stream (they finish with the same tokens, drafted locally:
// the fallback counter rises) and restarted on its port (the nodes reconnect and draft remotely
// again). Every wait has a deadline; conditions are polled through the decode nodes' Info.
#include <signal.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "serving_support.h"

namespace baton::testing {
namespace {

using namespace std::chrono_literals;

const std::string kNgram = R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})";
const std::string kSuffix = R"({"method":"suffix","num_speculative_tokens":4})";

// Greedy token ids of `baton generate` (the real binary, one process, no network) for each prompt.
std::vector<std::vector<std::int32_t>> reference(const std::string& spec, const std::vector<std::string>& prompts,
                                                 int max_tokens, bool ignore_eos) {
  const std::string file = (std::filesystem::temp_directory_path() / ("sidecar-prompts-" + std::to_string(::getpid()) + ".jsonl")).string();
  {
    std::ofstream out(file);
    for (const std::string& p : prompts) out << nlohmann::json{{"prompt", p}}.dump() << "\n";
  }
  std::vector<std::string> argv = {binary("baton"), "generate", "--model", family_path("target"), "--prompts-file", file,
                                   "--max-tokens", std::to_string(max_tokens), "--speculative-config", spec, "--json"};
  if (ignore_eos) argv.push_back("--ignore-eos");
  const auto [code, output] = run_to_exit(argv);
  std::filesystem::remove(file);
  EXPECT_EQ(code, 0) << output;
  std::vector<std::vector<std::int32_t>> ids(prompts.size());
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("index") || !j.contains("token_ids")) continue;
    ids.at(j["index"].get<std::size_t>()) = j["token_ids"].get<std::vector<std::int32_t>>();
  }
  for (const auto& v : ids) EXPECT_FALSE(v.empty()) << output;
  return ids;
}

// The decode nodes' config: the method's, with a budget generous enough that a loaded test machine
// still gets remote drafts (the budget only trades speed; misses are counted, not failures).
cli::ClusterOptions sidecar_cluster(const std::string& spec, const std::string& name) {
  nlohmann::json j = nlohmann::json::parse(spec);
  j["proposer_budget_ms"] = 200;
  cli::ClusterOptions o = cluster_options(j.dump(), "ucx", name);
  o.num_decode = 2;
  o.num_prefill = 1;
  o.proposer_sidecar = true;
  return o;
}

struct SidecarTotals {
  std::int64_t remote_steps = 0, remote_proposals = 0, fallback_steps = 0, reconnects = 0, budget_misses = 0;
  int connected = 0;
};

SidecarTotals totals(cli::LocalCluster& cluster) {
  SidecarTotals t;
  for (cli::ClusterProcess* d : cluster.nodes("decode")) {
    auto stub = decode_stub(d->address);
    const node::v1::ProposerSidecarStats s = node_info(*stub).load().proposer_sidecar();
    t.remote_steps += s.remote_steps();
    t.remote_proposals += s.remote_proposals();
    t.fallback_steps += s.fallback_steps();
    t.reconnects += s.reconnects();
    t.budget_misses += s.budget_misses();
    t.connected += s.connected() ? 1 : 0;
  }
  return t;
}

// Polls `done` every 20 ms until it holds or `timeout` passes.
template <class F>
bool eventually(F done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);  // polling interval, not synchronization
  }
  return done();
}

std::vector<v1::GenerateRequest> requests(const std::vector<std::string>& prompts, int max_tokens, bool ignore_eos) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  std::vector<v1::GenerateRequest> out;
  for (const std::string& prompt : prompts) out.push_back(text_request(prompt, p));
  return out;
}

void expect_greedy_equal(const std::string& spec, const std::string& name) {
  const std::vector<std::string> prompts = code_prompts();
  const auto expected = reference(spec, prompts, 48, false);
  auto cluster = cli::LocalCluster::start(sidecar_cluster(spec, name));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_NE((*cluster)->proposer(), nullptr);
  ASSERT_TRUE(eventually([&] { return totals(**cluster).connected == 2; }, 30s)) << "decode nodes did not connect";
  auto stub = router_stub((*cluster)->router_address());
  const std::vector<Completion> got = generate_all(*stub, requests(prompts, 48, false));
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, expected[i]) << "prompt " << i;
  }
  const SidecarTotals t = totals(**cluster);
  EXPECT_GT(t.remote_proposals, 0) << "no drafts came from the sidecar";
  std::cout << name << ": remote steps " << t.remote_steps << ", fallback steps " << t.fallback_steps
            << ", budget misses " << t.budget_misses << "\n";
}

TEST(SidecarServing, NgramGreedyEqualsLocalGenerate) { expect_greedy_equal(kNgram, "sidecar-ngram"); }
TEST(SidecarServing, SuffixGreedyEqualsLocalGenerate) { expect_greedy_equal(kSuffix, "sidecar-suffix"); }

TEST(SidecarServing, SidecarLossFallsBackLosslesslyAndReconnects) {
  const std::vector<std::string> prompts = {code_prompts()[0], code_prompts()[2], code_prompts()[3], code_prompts()[6]};
  constexpr int kMaxTokens = 300;
  const auto expected = reference(kSuffix, prompts, kMaxTokens, true);
  auto cluster = cli::LocalCluster::start(sidecar_cluster(kSuffix, "sidecar-kill"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cli::LocalCluster& c = **cluster;
  ASSERT_TRUE(eventually([&] { return totals(c).connected == 2; }, 30s));
  auto stub = router_stub(c.router_address());

  // Stream the requests; kill the sidecar once every one has streamed tokens and none has finished.
  const std::vector<v1::GenerateRequest> reqs = requests(prompts, kMaxTokens, true);
  std::vector<Completion> got(reqs.size());
  std::atomic<int> streaming{0};
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 180s);
      auto reader = stub->Generate(&ctx, reqs[i]);
      v1::GenerateResponse m;
      bool counted = false;
      while (reader->Read(&m)) {
        got[i].ids.insert(got[i].ids.end(), m.token_ids().begin(), m.token_ids().end());
        if (!counted && got[i].ids.size() > 1) {
          counted = true;
          ++streaming;
        }
      }
      got[i].status = reader->Finish();
      ++finished;
    });
  }
  const bool all_streaming = eventually([&] { return streaming.load() == static_cast<int>(reqs.size()) || finished.load() > 0; }, 120s);
  const SidecarTotals before = totals(c);
  const bool killed_mid_run = all_streaming && finished.load() == 0;
  c.proposer()->process->kill();
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(killed_mid_run) << "the requests finished before the sidecar was killed; make them longer";
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, expected[i]) << "prompt " << i;
  }
  const SidecarTotals after = totals(c);
  EXPECT_GT(before.remote_proposals, 0);
  EXPECT_GT(after.fallback_steps, before.fallback_steps) << "no step was drafted locally after the sidecar died";
  EXPECT_EQ(after.connected, 0);

  // Back on the same port: both nodes reconnect, and drafts come from the sidecar again.
  auto address = c.restart(*c.proposer());
  ASSERT_TRUE(address.ok()) << address.status();
  ASSERT_TRUE(eventually([&] {
    const SidecarTotals t = totals(c);
    return t.connected == 2 && t.reconnects >= 2;
  }, 30s)) << "the decode nodes did not reconnect";
  const std::int64_t remote_before = totals(c).remote_proposals;
  const auto again = reference(kSuffix, {prompts[1]}, 64, true);
  const std::vector<Completion> more = generate_all(*stub, requests({prompts[1], prompts[1]}, 64, true));
  for (const Completion& m : more) {
    ASSERT_TRUE(m.status.ok()) << m.status.error_message();
    EXPECT_EQ(m.ids, again[0]);
  }
  EXPECT_GT(totals(c).remote_proposals, remote_before) << "remote proposals did not resume";
}

// A sidecar that stops answering (SIGSTOP) costs each step its budget, never the request: steps
// draft locally (budget misses counted) with the reference's tokens; once it runs again (SIGCONT)
// its late replies are dropped and remote drafting resumes on the same connection.
TEST(SidecarServing, UnresponsiveSidecarCostsOnlyTheBudget) {
  const std::vector<std::string> prompts = {code_prompts()[3]};
  const auto expected = reference(kNgram, prompts, 24, true);
  auto cluster = cli::LocalCluster::start(sidecar_cluster(kNgram, "sidecar-stop"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cli::LocalCluster& c = **cluster;
  ASSERT_TRUE(eventually([&] { return totals(c).connected == 2; }, 30s));
  auto stub = router_stub(c.router_address());
  const pid_t pid = c.proposer()->process->pid();
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const SidecarTotals before = totals(c);
  const std::vector<Completion> got = generate_all(*stub, requests(prompts, 24, true));
  const SidecarTotals during = totals(c);
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status.error_message();
  EXPECT_EQ(got[0].ids, expected[0]);
  EXPECT_GT(during.budget_misses, before.budget_misses);
  EXPECT_GT(during.fallback_steps, before.fallback_steps);
  EXPECT_EQ(during.remote_proposals, before.remote_proposals);

  const std::vector<Completion> again = generate_all(*stub, requests(prompts, 24, true));
  ASSERT_TRUE(again[0].status.ok()) << again[0].status.error_message();
  EXPECT_EQ(again[0].ids, expected[0]);
  const SidecarTotals after = totals(c);
  EXPECT_GT(after.remote_proposals, during.remote_proposals) << "remote drafting did not resume";
  EXPECT_EQ(after.reconnects, 0) << "a slow sidecar should not cost the connection";
}

TEST(SidecarServing, ProposerSidecarNeedsAModelFreeMethod) {
  cli::ClusterOptions o = sidecar_cluster(R"({"method":"eagle3","model":")" + family_path("eagle3") +
                                              R"(","num_speculative_tokens":4})", "sidecar-bad");
  o.speculative_config = R"({"method":"eagle3","model":")" + family_path("eagle3") + R"(","num_speculative_tokens":4})";
  const auto cluster = cli::LocalCluster::start(o);
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cluster.status().message().find("ngram or suffix"), std::string_view::npos) << cluster.status();
}

TEST(SidecarServing, DecodeNodeRejectsProposerEndpointWithAModelMethod) {
  const std::string spec = R"({"method":"draft_model","model":")" + family_path("draft") +
                           R"(","num_speculative_tokens":3,"proposer_endpoint":"127.0.0.1:1"})";
  const auto [code, output] = run_to_exit({binary("baton-decode"), "--insecure", "--model", family_path("target"), "--port", "0",
                                           "--speculative-config", spec});
  EXPECT_NE(code, 0);
  EXPECT_NE(output.find("proposer_endpoint"), std::string::npos) << output;
  EXPECT_NE(output.find("ngram or suffix"), std::string::npos) << output;
}

}  // namespace
}  // namespace baton::testing
