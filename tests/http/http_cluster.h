// What the HTTP API tests on a fixture cluster share: the cluster (the bundled target under the
// ChatML copy of http_support.h, one API key, an HTTP port), OpenAI-shaped error checks, and the
// decode node's load (to see that a request left nothing behind). Needs BATON_BINARY_DIR.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "baton/v1/node.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/http/http_support.h"

namespace baton::testing {

inline constexpr const char* kKey = "test-key";
inline constexpr const char* kModelName = "baton-tiny-chat";

inline cli::ClusterOptions http_cluster(const std::string& model, const std::optional<std::string>& spec,
                                 const std::string& name, std::vector<std::string> router_args) {
  cli::ClusterOptions o;
  o.model_dir = model;
  o.speculative_config = spec;
  o.bin_dir = BATON_BINARY_DIR;
  o.log_dir = scratch_path("baton-http-" + name).string();
  o.node_args = {"--kv-cache-memory", "0.125"};
  o.http_port = 0;
  o.api_keys_file = (std::filesystem::path(o.log_dir) / "api-keys").string();
  std::filesystem::create_directories(o.log_dir);
  std::ofstream(o.api_keys_file) << "# the test's key\n" << kKey << "\n";
  o.router_args = router_args;
  o.start_timeout = std::chrono::seconds(120);
  return o;
}

inline void expect_error(const HttpResult& r, int status, const std::string& param, const std::string& code = "") {
  EXPECT_EQ(r.status, status) << r.body;
  const json b = r.json_body();
  ASSERT_TRUE(b.is_object() && b.contains("error")) << r.body;
  const json& e = b["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << r.body;
  } else {
    EXPECT_EQ(e["param"], param) << r.body;
  }
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.body;
  }
}

inline node::v1::NodeLoad decode_load(const std::string& address) {
  auto stub = node::v1::DecodeNode::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::NodeInfo info;
  const grpc::Status s = stub->Info(&ctx, node::v1::InfoRequest(), &info);
  BATON_CHECK(s.ok(), s.error_message());
  return info.load();
}

inline bool decode_idle(const node::v1::NodeLoad& load) {
  if (load.num_running() != 0 || load.num_waiting() != 0) return false;
  for (const auto& pool : load.pools()) {
    if (pool.used() != 0 || pool.reserved() != 0) return false;
  }
  return true;
}

// The decode node at `address` holds no request, block or reservation within 30 s (a failure
// otherwise, with its load).
inline void expect_decode_idle_soon(const std::string& address) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!decode_idle(decode_load(address)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(decode_idle(decode_load(address))) << decode_load(address).DebugString();
}

}  // namespace baton::testing
