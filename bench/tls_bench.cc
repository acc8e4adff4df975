// What security costs on the request path, measured in one run on the same prompts, one request
// at a time (batch 1), by a client of the router's public API:
//
//   plain   a cluster with --insecure everywhere (plain text, no keys);
//   secure  the same cluster with `baton up --tls` and an API key: mutual TLS between the
//           processes, TLS to the router, the per-request capability check before any KV moves.
//
// Per prompt: time to first token, decode tokens per second, and the KV transfer's bytes per
// second (the prefill node's KV bytes for the request over its kv_transfer_ms). Both clusters run
// at once and requests alternate between them, so drift in machine speed favours neither; each
// summary ratio is the median of the per-prompt ratios (secure / plain). Over UCX the KV bytes
// travel outside TLS, so their rate should not move (goal >= 0.95); over gRPC they are encrypted.
// Prints one JSON object per prompt, then a summary object.
//
// usage: tls_bench --model DIR --prompts FILE.jsonl [--field prompt] [--num-prompts 16]
//        [--max-tokens 64] [--transport ucx|grpc] [--threads-per-node 1] [--bin-dir DIR] [--join N]
// --join N makes each prompt N consecutive ones of the file joined: more KV per transfer, so that
// the fixed cost of the commit call weighs less in the KV rate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "baton/v1/node.grpc.pb.h"
#include "cli/cluster.h"
#include "cli/router_client.h"
#include "nlohmann/json.hpp"
#include "security/grpc_credentials.h"
#include "security/public_api_channel.h"

namespace {

using namespace baton;
using nlohmann::json;

constexpr const char* kKey = "tls-bench-key";

struct Args {
  std::string model, prompts, field = "prompt", transport = "ucx", bin_dir;
  int num_prompts = 16, max_tokens = 64, threads = 1;
  int join = 1;  // prompts joined into one (longer prompts: more KV per transfer)
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "tls_bench: %s\n", message.c_str());
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
    else if (k == "--transport") a.transport = v;
    else if (k == "--threads-per-node") a.threads = std::stoi(v);
    else if (k == "--bin-dir") a.bin_dir = v;
    else if (k == "--join") a.join = std::max(1, std::stoi(v));
    else die("unknown flag " + k);
  }
  if (a.model.empty() || a.prompts.empty()) die("usage: tls_bench --model DIR --prompts FILE.jsonl [flags]");
  return a;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One cluster and what the bench asks of it: the router's API, and its prefill node's Info.
struct Side {
  std::unique_ptr<cli::LocalCluster> cluster;
  std::unique_ptr<v1::Baton::Stub> router;
  std::unique_ptr<node::v1::PrefillNode::Stub> prefill;

  std::int64_t kv_bytes_sent() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::v1::NodeInfo info;
    const grpc::Status s = prefill->Info(&ctx, node::v1::InfoRequest(), &info);
    if (!s.ok()) die("prefill Info: " + s.error_message());
    return info.load().kv_bytes_sent();
  }
};

Side start(const Args& a, bool secure) {
  const std::string name = secure ? "secure" : "plain";
  cli::ClusterOptions o;
  o.model_dir = a.model;
  o.num_prefill = 1;
  o.transport = a.transport;
  o.bin_dir = a.bin_dir;
  o.threads_per_node = a.threads;
  o.node_args = {"--kv-cache-memory", "0.25", "--log-level", "warn"};
  o.log_dir = (std::filesystem::temp_directory_path() / ("baton-tls-bench-" + name)).string();
  o.tls = secure;
  if (secure) {
    std::filesystem::create_directories(o.log_dir);
    o.api_keys_file = o.log_dir + "/api-keys";
    std::ofstream(o.api_keys_file) << kKey << "\n";
    o.expose_topology = false;
  }
  auto c = cli::LocalCluster::start(o);
  if (!c.ok()) die(std::string(c.status().message()));
  Side s;
  s.cluster = std::move(*c);
  auto channel = security::public_api_channel(s.cluster->router_address(), s.cluster->ca_file(), secure ? kKey : "");
  if (!channel.ok()) die(std::string(channel.status().message()));
  s.router = v1::Baton::NewStub(*channel);
  // The bench reads the prefill node's counters as a cluster member would.
  security::TlsConfig member;
  if (secure) {
    const std::filesystem::path tls = std::filesystem::path(o.log_dir) / "tls";
    member.cert_file = (tls / "router.pem").string();
    member.key_file = (tls / "router-key.pem").string();
    member.ca_file = (tls / "ca.pem").string();
  }
  s.prefill = node::v1::PrefillNode::NewStub(grpc::CreateChannel(
      s.cluster->nodes("prefill").front()->address, security::make_cluster_channel_credentials(member)));
  return s;
}

struct Sample {
  double ttft_ms = 0, tokens_per_s = 0, kv_transfer_ms = 0, kv_gb_per_s = 0;
  std::int64_t kv_bytes = 0;
};

Sample measure(Side& side, const std::string& prompt, int max_tokens) {
  v1::GenerateRequest r;
  r.set_text(prompt);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  const std::int64_t before = side.kv_bytes_sent();
  const cli::RemoteResult res = cli::run_request(*side.router, r, nullptr, std::chrono::minutes(5));
  if (!res.status.ok()) die("request failed: " + res.status.error_message());
  Sample s;
  s.ttft_ms = res.ttft_s * 1e3;
  const double decode_s = res.total_s - res.ttft_s;
  s.tokens_per_s = res.ids.size() > 1 && decode_s > 0 ? static_cast<double>(res.ids.size() - 1) / decode_s : 0;
  s.kv_transfer_ms = res.usage.timings().kv_transfer_ms();
  s.kv_bytes = side.kv_bytes_sent() - before;
  s.kv_gb_per_s = s.kv_transfer_ms > 0 ? static_cast<double>(s.kv_bytes) / (s.kv_transfer_ms * 1e6) : 0;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::vector<std::string> prompts;
  std::ifstream in(a.prompts);
  std::string joined;
  int parts = 0;
  for (std::string line; std::getline(in, line) && static_cast<int>(prompts.size()) < a.num_prompts;) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains(a.field) || !j[a.field].is_string()) continue;
    joined += j[a.field].get<std::string>();
    if (++parts == a.join) {
      prompts.push_back(joined);
      joined.clear();
      parts = 0;
    }
  }
  if (prompts.empty()) die("no prompts with field '" + a.field + "' in " + a.prompts);

  Side plain = start(a, false), secure = start(a, true);
  // Warm-up: connections, handshakes, first touch of the KV memory.
  for (int i = 0; i < 2; ++i) {
    measure(plain, prompts[0], 8);
    measure(secure, prompts[0], 8);
  }
  std::vector<double> ttft_ratio, tps_ratio, kv_ratio, ttft_added;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Sample p, s;
    if (i % 2 == 0) {
      p = measure(plain, prompts[i], a.max_tokens);
      s = measure(secure, prompts[i], a.max_tokens);
    } else {
      s = measure(secure, prompts[i], a.max_tokens);
      p = measure(plain, prompts[i], a.max_tokens);
    }
    ttft_ratio.push_back(s.ttft_ms / p.ttft_ms);
    ttft_added.push_back(s.ttft_ms - p.ttft_ms);
    tps_ratio.push_back(s.tokens_per_s / p.tokens_per_s);
    if (p.kv_gb_per_s > 0 && s.kv_gb_per_s > 0) kv_ratio.push_back(s.kv_gb_per_s / p.kv_gb_per_s);
    std::cout << json{{"bench", "tls"}, {"prompt", i}, {"kv_bytes", p.kv_bytes},
                      {"plain", {{"ttft_ms", p.ttft_ms}, {"tokens_per_s", p.tokens_per_s},
                                 {"kv_transfer_ms", p.kv_transfer_ms}, {"kv_gb_per_s", p.kv_gb_per_s}}},
                      {"secure", {{"ttft_ms", s.ttft_ms}, {"tokens_per_s", s.tokens_per_s},
                                  {"kv_transfer_ms", s.kv_transfer_ms}, {"kv_gb_per_s", s.kv_gb_per_s}}}}
                     .dump()
              << std::endl;
  }
  std::cout << json{{"bench", "tls"},
                    {"summary", true},
                    {"transport", a.transport},
                    {"prompts", prompts.size()},
                    {"ttft_ratio_secure_over_plain_median", median(ttft_ratio)},
                    {"ttft_added_ms_median", median(ttft_added)},
                    {"tokens_per_s_ratio_secure_over_plain_median", median(tps_ratio)},
                    {"kv_gb_per_s_ratio_secure_over_plain_median", median(kv_ratio)},
                    {"kv_gb_per_s_goal", 0.95}}
                   .dump()
            << std::endl;
  return 0;
}
