// The proposer sidecar's figures (bench/run_sidecar_bench.sh), one JSON object per line:
//
//  rtt:        round trip of one step's proposal (context deltas out, drafts back) measured where a
//              decode node measures it — in its SidecarProposer — against a real baton-proposer on
//              loopback; p50/p99 per batch size, contexts grown as a decode loop grows them.
//  acceptance: a repeated-task workload on two decode nodes sharing one sidecar (suffix method):
//              each HumanEval task runs first on node 0, then on node 1; round 2 (node 1) is what
//              a cache shared across nodes can speed up. Mean acceptance length and median TPOT of
//              round 2, with the sidecar's cache global vs per node (--cache-scope node), and
//              their ratio. Requests go straight to each node (Decode with a local prefill) so the
//              placement is the benchmark's, not the router's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "baton/v1/node.grpc.pb.h"
#include "cli/cluster.h"
#include "common/flags.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "decode_node/sidecar_proposer.h"
#include "engine/spec/ngram_proposer.h"
#include "engine/spec/suffix_proposer.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace baton {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::vector<std::string> humaneval_prompts(const std::string& path, std::size_t n) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; out.size() < n && std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("prompt")) out.push_back(j["prompt"].get<std::string>());
  }
  return out;
}

// Round trips of SidecarProposer::propose against a real sidecar: `batch` requests, each step
// appends one to four tokens per request (as accepted drafts do).
json rtt_case(const std::string& endpoint, const std::vector<std::vector<std::int32_t>>& prompts, std::size_t batch,
              int steps, std::int32_t vocab) {
  const std::string spec = R"({"method":"suffix","num_speculative_tokens":4})";
  auto stats = std::make_shared<SidecarStats>();
  SidecarProposerOptions o;
  o.connection.endpoint = endpoint;
  o.connection.node_id = "sidecar_bench";
  o.connection.speculative_config = spec;
  o.budget = std::chrono::microseconds(1'000'000);  // measure, do not fall back
  o.vocab_size = vocab;
  SuffixProposerConfig local;
  local.max_spec_tokens = 4;
  SidecarProposer proposer(o, std::make_unique<SuffixProposer>(local), stats);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!proposer.connection_epoch() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<std::vector<std::int32_t>> ctx;
  std::vector<std::vector<std::int32_t>> drafts(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    ctx.push_back(prompts[i % prompts.size()]);
    proposer.add_request(i, ctx.back());
  }
  std::vector<double> rtt_us;
  for (int s = 0; s < steps; ++s) {
    std::vector<ProposalRequest> b(batch);
    for (std::size_t i = 0; i < batch; ++i) {
      // Grow as a decode loop does: the prompt again, token by token (repetitive, like code).
      const std::size_t grow = 1 + static_cast<std::size_t>((s + static_cast<int>(i)) % 4);
      for (std::size_t g = 0; g < grow; ++g) ctx[i].push_back(ctx[i][ctx[i].size() % prompts[i % prompts.size()].size()]);
      b[i].key = i;
      b[i].tokens = ctx[i];
      b[i].prompt_len = static_cast<std::int32_t>(prompts[i % prompts.size()].size());
      b[i].max_drafts = 4;
      b[i].drafts = &drafts[i];
    }
    const auto t0 = Clock::now();
    (void)proposer.propose(b);
    rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  for (std::size_t i = 0; i < batch; ++i) proposer.remove_request(i, true);
  return {{"bench", "sidecar_rtt"},          {"batch", batch},
          {"steps", steps},                  {"rtt_p50_us", percentile(rtt_us, 0.5)},
          {"rtt_p99_us", percentile(rtt_us, 0.99)}, {"remote_steps", stats->remote_steps.load()},
          {"fallback_steps", stats->fallback_steps.load()}};
}

struct RunResult {
  double mean_acceptance_length = 0;
  double tpot_median_ms = 0;
  std::int64_t drafts = 0, accepted = 0;
};

// One request straight to a decode node (local prefill), greedy; TPOT measured here.
absl::StatusOr<std::pair<node::v1::DecodeResponse, double>> decode_once(node::v1::DecodeNode::Stub& stub,
                                                                      const std::string& id,
                                                                      const std::vector<std::int32_t>& prompt,
                                                                      int max_tokens) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  node::v1::DecodeRequest r;
  r.set_request_id(id);
  r.mutable_local()->mutable_prompt()->Add(prompt.begin(), prompt.end());
  r.mutable_local()->mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_local()->mutable_sampling()->set_temperature(0);
  auto reader = stub.Decode(&ctx, r);
  node::v1::DecodeResponse m, last;
  std::int64_t tokens = 0;
  Clock::time_point first{};
  while (reader->Read(&m)) {
    if (tokens == 0 && m.token_ids_size() > 0) first = Clock::now();
    tokens += m.token_ids_size();
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = m;
  }
  const grpc::Status s = reader->Finish();
  if (!s.ok()) return absl::InternalError(str_cat("decode ", id, ": ", s.error_message()));
  const double tpot = tokens > 1 ? std::chrono::duration<double, std::milli>(Clock::now() - first).count() /
                                       static_cast<double>(tokens - 1)
                                 : 0.0;
  return std::make_pair(last, tpot);
}

absl::StatusOr<RunResult> acceptance_run(const cli::ClusterOptions& base, const std::string& scope,
                                         const std::vector<std::vector<std::int32_t>>& prompts, int max_tokens) {
  cli::ClusterOptions o = base;
  o.proposer_args = {"--cache-scope", scope};
  BATON_ASSIGN_OR_RETURN(auto cluster, cli::LocalCluster::start(o));
  std::vector<std::unique_ptr<node::v1::DecodeNode::Stub>> stubs;
  for (cli::ClusterProcess* d : cluster->nodes("decode")) {
    stubs.push_back(node::v1::DecodeNode::NewStub(grpc::CreateChannel(d->address, grpc::InsecureChannelCredentials())));
  }
  // Both nodes connected to the sidecar before anything is measured.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (auto& stub : stubs) {
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      node::v1::NodeInfo info;
      if (stub->Info(&ctx, node::v1::InfoRequest(), &info).ok() && info.load().proposer_sidecar().connected()) break;
      if (Clock::now() > deadline) return absl::DeadlineExceededError("a decode node did not connect to the sidecar");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  RunResult r;
  std::vector<double> tpots;
  for (std::size_t t = 0; t < prompts.size(); ++t) {
    BATON_RETURN_IF_ERROR(decode_once(*stubs[0], str_cat("r1-", t), prompts[t], max_tokens).status());
    BATON_ASSIGN_OR_RETURN(auto second, decode_once(*stubs[1], str_cat("r2-", t), prompts[t], max_tokens));
    r.drafts += second.first.speculation().num_drafts();
    r.accepted += second.first.speculation().num_accepted_tokens();
    tpots.push_back(second.second);
  }
  r.mean_acceptance_length = r.drafts > 0 ? 1.0 + static_cast<double>(r.accepted) / static_cast<double>(r.drafts) : 0.0;
  r.tpot_median_ms = percentile(tpots, 0.5);
  return r;
}

int run(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"bin-dir", "DIR", "the build tree (baton-proposer, baton-decode, baton-router)"},
      {"model", "DIR", "target model (with a tokenizer)"},
      {"prompts", "FILE", "HumanEval JSONL (uncompressed)"},
      {"tasks", "N", "HumanEval tasks in the acceptance workload (default 8)"},
      {"max-tokens", "N", "tokens per request (default 96)"},
      {"rtt-steps", "N", "steps per round-trip case (default 2000)"},
      {"threads", "N", "CPU threads per decode node (default 1)"},
  };
  auto f = parse_flags(specs, argc, argv);
  if (!f.ok()) {
    std::fprintf(stderr, "sidecar_bench: %s\n%s", std::string(f.status().message()).c_str(),
                 usage("sidecar_bench", "", specs).c_str());
    return 2;
  }
  const std::string bin_dir = f->get("bin-dir").value_or("build/release");
  const std::string model = f->get("model").value_or("models/baton-tiny-code/target");
  const int tasks = static_cast<int>(f->get_int("tasks").value_or(8).value_or(8));
  const int max_tokens = static_cast<int>(f->get_int("max-tokens").value_or(96).value_or(96));
  const int rtt_steps = static_cast<int>(f->get_int("rtt-steps").value_or(2000).value_or(2000));
  const int threads = static_cast<int>(f->get_int("threads").value_or(1).value_or(1));
  auto tokenizer = Tokenizer::load(model);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "sidecar_bench: %s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  std::vector<std::vector<std::int32_t>> prompts;
  for (const std::string& p : humaneval_prompts(f->get("prompts").value_or(""), static_cast<std::size_t>(tasks))) {
    prompts.push_back((*tokenizer)->encode(p, true));
  }
  if (prompts.empty()) {
    std::fprintf(stderr, "sidecar_bench: no prompts (give --prompts FILE)\n");
    return 1;
  }
  const std::int32_t vocab = static_cast<std::int32_t>((*tokenizer)->vocab_size());

  // 1. Round trips against a bare sidecar.
  {
    auto bin = cli::LocalCluster::find_binary("baton-proposer", bin_dir);
    if (!bin.ok()) {
      std::fprintf(stderr, "sidecar_bench: %s\n", std::string(bin.status().message()).c_str());
      return 1;
    }
    Subprocess::Options so;
    so.argv = {*bin, "--insecure", "--port", "0", "--log-level", "warn"};
    auto p = Subprocess::start(so);
    if (!p.ok()) return 1;
    auto line = (*p)->wait_for_line(" ready on ", std::chrono::seconds(30));
    if (!line.ok()) {
      std::fprintf(stderr, "sidecar_bench: baton-proposer did not start: %s\n", (*p)->log_tail().c_str());
      return 1;
    }
    const std::string rest = line->substr(line->find(" ready on ") + 10);
    const std::string endpoint = rest.substr(0, rest.find(' '));
    for (std::size_t batch : {1, 8, 32}) {
      std::cout << rtt_case(endpoint, prompts, batch, rtt_steps, vocab).dump() << std::endl;
    }
    (*p)->terminate();
  }

  // 2. Acceptance and TPOT, global vs per-node cache.
  cli::ClusterOptions o;
  o.model_dir = model;
  o.speculative_config = R"({"method":"suffix","num_speculative_tokens":4})";
  o.proposer_sidecar = true;
  o.num_decode = 2;
  o.num_prefill = 0;
  o.bin_dir = bin_dir;
  o.threads_per_node = threads;
  o.node_args = {"--kv-cache-memory", "0.25", "--log-level", "warn"};
  o.log_dir = (std::filesystem::temp_directory_path() / str_cat("baton-sidecar-bench-", ::getpid())).string();
  auto global = acceptance_run(o, "global", prompts, max_tokens);
  auto per_node = acceptance_run(o, "node", prompts, max_tokens);
  if (!global.ok() || !per_node.ok()) {
    std::fprintf(stderr, "sidecar_bench: %s\n",
                 std::string((global.ok() ? per_node.status() : global.status()).message()).c_str());
    return 1;
  }
  for (const auto& [name, r] : {std::pair{"global", *global}, std::pair{"node", *per_node}}) {
    std::cout << json{{"bench", "sidecar_acceptance"}, {"cache_scope", name}, {"tasks", prompts.size()},
                      {"max_tokens", max_tokens}, {"round2_mean_acceptance_length", r.mean_acceptance_length},
                      {"round2_tpot_median_ms", r.tpot_median_ms}, {"round2_drafts", r.drafts},
                      {"round2_accepted_tokens", r.accepted}}.dump()
              << std::endl;
  }
  std::cout << json{{"bench", "sidecar_global_vs_node"},
                    {"mean_acceptance_length_ratio", per_node->mean_acceptance_length > 0
                                                         ? global->mean_acceptance_length / per_node->mean_acceptance_length
                                                         : 0.0},
                    {"tpot_median_ratio", global->tpot_median_ms > 0 ? per_node->tpot_median_ms / global->tpot_median_ms : 0.0}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) { return baton::run(argc, argv); }
