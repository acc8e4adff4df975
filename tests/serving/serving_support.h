// What the end-to-end serving tests share: the bundled model family and its speculative methods,
// a local cluster of real processes (cli/cluster.h — the same code as `baton up`), a client of
// the router's public API, and the local reference (one colocated engine, as `baton generate`).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "baton/v1/api.grpc.pb.h"
#include "baton/v1/node.grpc.pb.h"
#include "cli/cluster.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "node_common/convert.h"
#include "node_common/engine_flags.h"
#include "tests/support/scratch.h"
#include "tokenizer/tokenizer.h"

namespace baton::testing {

inline std::string family_path(const std::string& part) {
  return str_cat(BATON_SOURCE_DIR, "/models/baton-tiny-code/", part);
}

struct SpecCase {
  std::string label;
  std::optional<std::string> config;  // the decode nodes' JSON (prefill nodes get k = 1)
};

// No speculation and every method the bundled family supports.
inline std::vector<SpecCase> family_methods() {
  return {
      {"none", std::nullopt},
      {"ngram", R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})"},
      {"suffix", R"({"method":"suffix","num_speculative_tokens":4})"},
      {"draft_model", R"({"method":"draft_model","model":")" + family_path("draft") + R"(","num_speculative_tokens":3})"},
      {"eagle3", R"({"method":"eagle3","model":")" + family_path("eagle3") + R"(","num_speculative_tokens":4})"},
      {"mtp", R"({"method":"mtp","model":")" + family_path("mtp") + R"("})"},
      {"medusa", R"({"method":"medusa","model":")" + family_path("medusa") + R"(","num_speculative_tokens":4})"},
      {"dflash", R"({"method":"dflash","model":")" + family_path("dflash") + R"(","num_speculative_tokens":4})"},
  };
}

// Code prompts of mixed lengths (the bundled family is trained on Python).
inline std::vector<std::string> code_prompts() {
  return {
      "def fibonacci(n):",
      "import os\n\ndef list_files(path):\n    \"\"\"Return the files under path, recursively.\"\"\"\n",
      "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
      "def is_prime(n):\n    if n < 2:\n        return False\n",
      "# Merge two sorted lists into one sorted list.\ndef merge(a, b):\n    result = []\n    i = j = 0\n"
      "    while i < len(a) and j < len(b):\n",
      "def read_config(path):\n    with open(path) as f:\n",
      "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
      "    \"\"\" Check if in given list of numbers, are any two numbers closer to each other than\n"
      "    given threshold.\n    \"\"\"\n",
      "x = [",
  };
}

inline cli::ClusterOptions cluster_options(const std::optional<std::string>& spec, const std::string& transport,
                                           const std::string& name, const std::string& model_dir = family_path("target")) {
  cli::ClusterOptions o;
  o.model_dir = model_dir;
  o.speculative_config = spec;
  o.transport = transport;
  o.bin_dir = BATON_BINARY_DIR;
  o.log_dir = scratch_path("baton-test-" + name).string();
  o.node_args = {"--kv-cache-memory", "0.125", "--log-level", "info"};
  o.start_timeout = std::chrono::seconds(120);
  return o;
}

inline std::unique_ptr<v1::Baton::Stub> router_stub(const std::string& address) {
  return v1::Baton::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

struct Completion {
  grpc::Status status;
  std::vector<std::int32_t> ids;
  std::string text;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  std::string error;
  v1::Usage usage;
  int messages = 0;
};

inline v1::GenerateRequest text_request(const std::string& prompt, const SamplingParams& params) {
  v1::GenerateRequest r;
  r.set_text(prompt);
  *r.mutable_sampling() = sampling_to_proto(params);
  return r;
}

// One streamed completion through the router, with a deadline.
inline Completion generate(v1::Baton::Stub& stub, const v1::GenerateRequest& request,
                           std::chrono::seconds timeout = std::chrono::seconds(180)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  Completion c;
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    ++c.messages;
    c.ids.insert(c.ids.end(), m.token_ids().begin(), m.token_ids().end());
    c.text += m.text();
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      c.finish_reason = m.finish_reason();
      c.error = m.error();
      c.usage = m.usage();
    }
  }
  c.status = reader->Finish();
  return c;
}

// Many completions at once (one thread each), in request order.
inline std::vector<Completion> generate_all(v1::Baton::Stub& stub, const std::vector<v1::GenerateRequest>& requests) {
  std::vector<Completion> out(requests.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = generate(stub, requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

struct LocalResult {
  std::vector<std::int32_t> ids;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
};

// The reference: the same prompts through one colocated engine in this process, as `baton
// generate` runs them (text encoded with special tokens, the tokenizer's text decoder attached).
inline std::vector<LocalResult> run_local(const std::optional<std::string>& spec, const std::vector<std::string>& prompts,
                                          const std::vector<SamplingParams>& params,
                                          std::optional<DType> kv_cache_dtype = std::nullopt,
                                          const std::string& model_dir = family_path("target")) {
  EngineConfig config;
  config.model_dir = model_dir;
  config.kv_cache_bytes = 128LL << 20;
  config.kv_cache_dtype = kv_cache_dtype;
  if (spec) {
    auto parsed = SpeculativeConfig::parse(*spec, NodeRole::kColocated);
    BATON_CHECK(parsed.ok(), parsed.status().ToString());
    config.speculative = *parsed;
  }
  auto tokenizer = Tokenizer::load(config.model_dir);
  BATON_CHECK(tokenizer.ok(), tokenizer.status().ToString());
  auto engine = Engine::create(config);
  BATON_CHECK(engine.ok(), engine.status().ToString());
  attach_tokenizer(**engine, **tokenizer);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const absl::Status s = (*engine)->add_request(std::to_string(i), (*tokenizer)->encode(prompts[i], true), params[i]);
    BATON_CHECK(s.ok(), s.ToString());
  }
  std::vector<LocalResult> out(prompts.size());
  while ((*engine)->has_unfinished()) {
    auto outs = (*engine)->step();
    BATON_CHECK(outs.ok(), outs.status().ToString());
    for (const RequestOutput& o : *outs) {
      LocalResult& r = out[std::stoul(o.request_id)];
      for (const TokenOutput& t : o.new_tokens) r.ids.push_back(t.token);
      r.text += o.new_text;
      if (o.finished) r.finish_reason = o.finish_reason;
    }
  }
  return out;
}

}  // namespace baton::testing

namespace baton::testing {

// Runs a binary to its exit (deadline: 120 s); returns its status and output.
inline std::pair<int, std::string> run_to_exit(std::vector<std::string> argv) {
  Subprocess::Options o;
  o.argv = std::move(argv);
  auto p = Subprocess::start(std::move(o));
  BATON_CHECK(p.ok(), p.status().ToString());
  const std::optional<int> code = (*p)->wait(std::chrono::seconds(120));
  BATON_CHECK(code.has_value(), "the process did not exit in 120 s");
  // Output ends with the process (nothing else holds the pipe): wait for its end, then read it.
  (void)(*p)->wait_for_line("\x01never printed\x01", std::chrono::seconds(10));
  return {*code, (*p)->log_tail(1000)};
}

// Starts a binary (its output captured, see Subprocess); dies with the reason if it cannot.
inline std::unique_ptr<Subprocess> start_process(std::vector<std::string> argv) {
  Subprocess::Options o;
  o.argv = std::move(argv);
  auto p = Subprocess::start(std::move(o));
  BATON_CHECK(p.ok(), p.status().ToString());
  return std::move(*p);
}

// The HOST:PORT of a binary's "<name> ready on HOST:PORT ..." line (deadline: 120 s).
inline std::string ready_address(Subprocess& p) {
  auto line = p.wait_for_line(" ready on ", std::chrono::seconds(120));
  BATON_CHECK(line.ok(), line.status().ToString());
  const std::string rest = line->substr(line->find(" ready on ") + 10);
  return rest.substr(0, rest.find(' '));
}

// The router's node registry, from its "baton-router internal on HOST:PORT" line (printed before
// its ready line; the router runs with --internal-port).
inline std::string registry_address(Subprocess& router) {
  auto line = router.wait_for_line("baton-router internal on ", std::chrono::seconds(10));
  BATON_CHECK(line.ok(), line.status().ToString());
  const std::string rest = line->substr(line->find(" on ") + 4);
  return rest.substr(0, rest.find_first_of(" \r\n"));
}

inline std::string binary(const std::string& name) {
  auto path = cli::LocalCluster::find_binary(name, BATON_BINARY_DIR);
  BATON_CHECK(path.ok(), path.status().ToString());
  return *path;
}

inline std::unique_ptr<node::v1::DecodeNode::Stub> decode_stub(const std::string& address) {
  return node::v1::DecodeNode::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

inline std::unique_ptr<node::v1::PrefillNode::Stub> prefill_stub(const std::string& address) {
  return node::v1::PrefillNode::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

template <class Stub>
node::v1::NodeInfo node_info(Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::NodeInfo info;
  const grpc::Status s = stub.Info(&ctx, node::v1::InfoRequest(), &info);
  BATON_CHECK(s.ok(), s.error_message());
  return info;
}

// Every pool of a decode node: nothing reserved, nothing held.
inline void expect_no_kv_held(const node::v1::NodeInfo& info) {
  for (const node::v1::KvPoolUsage& pool : info.load().pools()) {
    EXPECT_EQ(pool.reserved(), 0) << pool.name();
    EXPECT_EQ(pool.used(), 0) << pool.name();
  }
}

// Polls a decode node until it holds no KV (blocks a killed prefill node may have been writing
// stay quarantined until the node finds it gone, about two seconds), then checks that.
inline void expect_no_kv_held_within(node::v1::DecodeNode::Stub& d, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  node::v1::NodeInfo info = node_info(d);
  while (std::chrono::steady_clock::now() < deadline && info.load().pools(0).used() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    info = node_info(d);
  }
  expect_no_kv_held(info);
  EXPECT_EQ(info.load().counters().write_quarantines_expired(), 0);
}

}  // namespace baton::testing
