// A router in-process in front of scripted nodes (fake_nodes.h), for the request-flow tests: one
// fake decode node, some fake prefill nodes, the router's options pointing at them, and helpers
// to hold a Generate stream open and to abort.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fake_nodes.h"
#include "node_info_builders.h"
#include "router/router_service.h"
#include "router_client.h"

namespace baton::router::testing {

class Cluster {
 public:
  // One decode node and `num_prefill` prefill nodes (specs: {method, k} of D and of every P).
  Cluster(int num_prefill, const std::string& d_method = "", int d_k = 0, const std::string& p_method = "",
          int p_k = 0)
      : decode(with_load(node_info("decode", d_method, d_k), 500)) {
    for (int i = 0; i < num_prefill; ++i) {
      prefills.push_back(std::make_unique<FakePrefillNode>(
          with_load(node_info("prefill", p_method, p_k), 0, 0, 0, /*queued=*/i * 100),
          std::map<std::string, FakeDecodeNode*>{{decode.address(), &decode}}));
    }
  }

  RouterOptions options() const {
    RouterOptions o;
    o.decode_addresses = {decode.address()};
    for (const auto& p : prefills) o.prefill_addresses.push_back(p->address());
    o.poll_interval = std::chrono::minutes(1);  // the tests decide when nodes are polled
    o.flow.commit_timeout = std::chrono::seconds(10);
    o.expose_topology = true;  // these tests follow requests to the nodes by address
    return o;
  }

  FakeDecodeNode decode;
  std::vector<std::unique_ptr<FakePrefillNode>> prefills;
};

struct Router {
  explicit Router(const RouterOptions& options) : service(options) {
    auto port = service.start();
    EXPECT_TRUE(port.ok()) << port.status();
    client = std::make_unique<RouterClient>(*port);
  }
  ~Router() { service.shutdown(); }
  RouterService service;
  std::unique_ptr<RouterClient> client;
};

inline bool usable(RouterService& router, const std::string& address) {
  for (const auto& n : router.nodes().status()) {
    if (n.address == address) return n.usable;
  }
  return false;
}

// Reads a Generate stream up to its `n`th message.
class OpenStream {
 public:
  OpenStream(RouterClient& client, const baton::v1::GenerateRequest& request)
      : reader_(client.stub().Generate(&context, request)) {}
  bool read(int n) {
    for (int i = 0; i < n; ++i) {
      baton::v1::GenerateResponse m;
      if (!reader_->Read(&m)) return false;
      result.messages.push_back(m);
    }
    return true;
  }
  GenerateResult finish() {
    baton::v1::GenerateResponse m;
    while (reader_->Read(&m)) result.messages.push_back(m);
    result.status = reader_->Finish();
    return result;
  }
  grpc::ClientContext context;
  GenerateResult result;

 private:
  std::unique_ptr<grpc::ClientReader<baton::v1::GenerateResponse>> reader_;
};

inline bool abort_rpc(RouterClient& client, const std::string& id) {
  grpc::ClientContext context;
  baton::v1::AbortRequest abort;
  abort.set_request_id(id);
  baton::v1::AbortResponse response;
  EXPECT_TRUE(client.stub().Abort(&context, abort, &response).ok());
  return response.found();
}

}  // namespace baton::router::testing
