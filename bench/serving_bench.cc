// Serving benchmark: what disaggregation and the router cost, measured in one run on the same
// prompts, one request at a time (batch 1), by a client of the router's public API.
//
//   tpot_ratio      median TPOT disaggregated (router -> P -> D, KV over --transport) divided by
//                   median TPOT colocated (router -> D prefilling locally); goal <= 1.10.
//   ttft_overhead   median over prompts of TTFT disaggregated - TTFT colocated (the transfer, the
//                   extra hop and the commit), next to P's own KV transfer time.
//   router_overhead median end-to-end latency of short requests through the router minus the same
//                   requests sent straight to the decode node's Decode stream (local prefill).
//
// Both clusters run at once (each node with --threads-per-node threads, every decode node alike)
// and requests alternate between them per prompt, so drift in machine speed favours neither.
// Prints one JSON object per request kind, then a summary object; all times in milliseconds.
//
// usage: serving_bench --model DIR --prompts FILE.jsonl [--field prompt] [--num-prompts 16]
//        [--max-tokens 64] [--speculative-config JSON] [--transport ucx|grpc] [--threads-per-node 1]
//        [--overhead-requests 40] [--bin-dir DIR] [--node-flag FLAG ...]
// --node-flag passes a flag to every node, e.g. --node-flag --testing-cpu-discrete-memory to time
// the KV's way through host mirrors (what a GPU node does) against the direct one.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "baton/v1/node.grpc.pb.h"
#include "cli/cluster.h"
#include "cli/router_client.h"
#include "nlohmann/json.hpp"

namespace {

using namespace baton;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, prompts, field = "prompt", transport = "ucx", bin_dir;
  std::optional<std::string> spec;
  std::vector<std::string> node_flags;  // --node-flag F (repeatable): extra flags for every node
  int num_prompts = 16, max_tokens = 64, threads = 1, overhead_requests = 40;
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "serving_bench: %s\n", message.c_str());
  std::exit(1);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--prompts") a.prompts = v;
    else if (k == "--field") a.field = v;
    else if (k == "--num-prompts") a.num_prompts = std::stoi(v);
    else if (k == "--max-tokens") a.max_tokens = std::stoi(v);
    else if (k == "--speculative-config") a.spec = v;
    else if (k == "--transport") a.transport = v;
    else if (k == "--threads-per-node") a.threads = std::stoi(v);
    else if (k == "--overhead-requests") a.overhead_requests = std::stoi(v);
    else if (k == "--bin-dir") a.bin_dir = v;
    else if (k == "--node-flag") a.node_flags.push_back(v);
    else die("unknown flag " + k);
  }
  if (a.model.empty() || a.prompts.empty()) die("usage: serving_bench --model DIR --prompts FILE.jsonl [flags]");
  return a;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::unique_ptr<cli::LocalCluster> start(const Args& a, int num_prefill, const std::string& name) {
  cli::ClusterOptions o;
  o.model_dir = a.model;
  o.speculative_config = a.spec;
  o.num_prefill = num_prefill;
  o.transport = a.transport;
  o.bin_dir = a.bin_dir;
  o.threads_per_node = a.threads;
  o.node_args = {"--kv-cache-memory", "0.25", "--log-level", "warn"};
  o.node_args.insert(o.node_args.end(), a.node_flags.begin(), a.node_flags.end());
  o.log_dir = (std::filesystem::temp_directory_path() / ("baton-serving-bench-" + name)).string();
  auto c = cli::LocalCluster::start(o);
  if (!c.ok()) die(std::string(c.status().message()));
  return std::move(*c);
}

struct Sample {
  double ttft_ms = 0, tpot_ms = 0, e2e_ms = 0, kv_transfer_ms = 0;
};

Sample measure(v1::Baton::Stub& stub, const std::string& prompt, int max_tokens) {
  v1::GenerateRequest r;
  r.set_text(prompt);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  const cli::RemoteResult res = cli::run_request(stub, r, nullptr, std::chrono::minutes(5));
  if (!res.status.ok()) die("request failed: " + res.status.error_message());
  Sample s;
  s.ttft_ms = res.ttft_s * 1e3;
  s.e2e_ms = res.total_s * 1e3;
  s.tpot_ms = res.ids.size() > 1 ? (res.total_s - res.ttft_s) * 1e3 / static_cast<double>(res.ids.size() - 1) : 0;
  s.kv_transfer_ms = res.usage.timings().kv_transfer_ms();
  return s;
}

// The same short request straight to a decode node (local prefill there), end to end.
double direct_decode_ms(node::v1::DecodeNode::Stub& d, const std::vector<std::int32_t>& prompt, int max_tokens, int n) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(1));
  node::v1::DecodeRequest req;
  req.set_request_id("direct-" + std::to_string(n));
  req.mutable_local()->mutable_prompt()->Add(prompt.begin(), prompt.end());
  req.mutable_local()->mutable_sampling()->set_temperature(0);
  req.mutable_local()->mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_local()->mutable_sampling()->set_ignore_eos(true);
  const auto start = Clock::now();
  auto stream = d.Decode(&ctx, req);
  for (node::v1::DecodeResponse m; stream->Read(&m);) {
  }
  const grpc::Status s = stream->Finish();
  if (!s.ok()) die("direct Decode failed: " + s.error_message());
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

json summary_of(const std::string& kind, const std::vector<Sample>& v) {
  std::vector<double> ttft, tpot, e2e, kv;
  for (const Sample& s : v) {
    ttft.push_back(s.ttft_ms);
    tpot.push_back(s.tpot_ms);
    e2e.push_back(s.e2e_ms);
    kv.push_back(s.kv_transfer_ms);
  }
  return {{"bench", "serving"}, {"kind", kind}, {"requests", v.size()}, {"ttft_ms_median", median(ttft)},
          {"tpot_ms_median", median(tpot)}, {"e2e_ms_median", median(e2e)}, {"kv_transfer_ms_median", median(kv)}};
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::vector<std::string> prompts;
  std::ifstream in(a.prompts);
  for (std::string line; std::getline(in, line) && static_cast<int>(prompts.size()) < a.num_prompts;) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains(a.field) && j[a.field].is_string()) prompts.push_back(j[a.field].get<std::string>());
  }
  if (prompts.empty()) die("no prompts with field '" + a.field + "' in " + a.prompts);

  auto coloc = start(a, 0, "colocated");
  auto disagg = start(a, 1, "disaggregated");
  auto coloc_stub = v1::Baton::NewStub(grpc::CreateChannel(coloc->router_address(), grpc::InsecureChannelCredentials()));
  auto disagg_stub = v1::Baton::NewStub(grpc::CreateChannel(disagg->router_address(), grpc::InsecureChannelCredentials()));
  // Warm-up: one request each (connections, first-touch of KV memory).
  measure(*coloc_stub, prompts[0], 8);
  measure(*disagg_stub, prompts[0], 8);

  std::vector<Sample> c, d;
  std::vector<double> ttft_overhead;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Sample sc, sd;
    if (i % 2 == 0) {
      sc = measure(*coloc_stub, prompts[i], a.max_tokens);
      sd = measure(*disagg_stub, prompts[i], a.max_tokens);
    } else {
      sd = measure(*disagg_stub, prompts[i], a.max_tokens);
      sc = measure(*coloc_stub, prompts[i], a.max_tokens);
    }
    c.push_back(sc);
    d.push_back(sd);
    ttft_overhead.push_back(sd.ttft_ms - sc.ttft_ms);
  }
  const json jc = summary_of("colocated", c), jd = summary_of("disaggregated", d);
  std::cout << jc.dump() << "\n" << jd.dump() << std::endl;

  // Router overhead: short requests via the router (local prefill) vs straight to D.
  auto d_stub = node::v1::DecodeNode::NewStub(
      grpc::CreateChannel(coloc->nodes("decode").front()->address, grpc::InsecureChannelCredentials()));
  const std::vector<std::int32_t> short_prompt = {314, 285, 676, 266, 1162, 473, 904, 298};
  v1::GenerateRequest via;
  via.mutable_token_ids()->mutable_ids()->Add(short_prompt.begin(), short_prompt.end());
  via.mutable_sampling()->set_temperature(0);
  via.mutable_sampling()->set_max_tokens(4);
  via.mutable_sampling()->set_ignore_eos(true);
  std::vector<double> routed, direct, paired;
  for (int i = 0; i < a.overhead_requests; ++i) {
    const cli::RemoteResult r = cli::run_request(*coloc_stub, via, nullptr, std::chrono::minutes(1));
    if (!r.status.ok()) die("routed request failed: " + r.status.error_message());
    const double dm = direct_decode_ms(*d_stub, short_prompt, 4, i);
    routed.push_back(r.total_s * 1e3);
    direct.push_back(dm);
    paired.push_back(r.total_s * 1e3 - dm);
  }
  json overhead = {{"bench", "serving"}, {"kind", "router_overhead"}, {"requests", a.overhead_requests},
                   {"routed_e2e_ms_median", median(routed)}, {"direct_e2e_ms_median", median(direct)},
                   {"router_overhead_ms_median", median(paired)}};
  std::cout << overhead.dump() << std::endl;

  json s = {{"bench", "serving"},
            {"summary", true},
            {"model", a.model},
            {"speculative_config", a.spec ? *a.spec : ""},
            {"transport", a.transport},
            {"node_flags", a.node_flags},
            {"prompts", prompts.size()},
            {"max_tokens", a.max_tokens},
            {"tpot_ratio_disaggregated_over_colocated", jd["tpot_ms_median"].get<double>() / jc["tpot_ms_median"].get<double>()},
            {"ttft_overhead_ms_median", median(ttft_overhead)},
            {"kv_transfer_ms_median", jd["kv_transfer_ms_median"]},
            {"router_overhead_ms_median", median(paired)},
            {"goal_tpot_ratio", 1.10}};
  std::cout << s.dump() << std::endl;
  return 0;
}
