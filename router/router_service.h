// The router as a server: the public baton.v1.Baton service (Generate, Abort, GetModelInfo,
// Tokenize), the baton.node.v1.Registry service nodes join through, grpc.health.v1 and server
// reflection, all on one port. Owns the tokenizer (none: token-id mode), the node pool, the
// running requests and the counters. Easy to start in-process:
//
//   RouterService router(options);
//   absl::StatusOr<int> port = router.start();   // binds host:port (port 0: one is picked)
//   ...
//   router.shutdown();
//
// Must not: load model weights or link the engine (CMake forbids it); keep request logic here
// (request_flow.h has it).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "router/node_pool.h"
#include "router/request_flow.h"
#include "metrics/metrics_server.h"
#include "router/router_metrics.h"
#include "router/router_stats.h"
#include "router/running_requests.h"

namespace grpc {
class Server;
}

namespace baton {
class Tokenizer;
}

namespace baton::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                  // 0: pick a free port
  std::string model_dir;                         // tokenizer files only; "" or none there: token-id mode
  std::vector<std::string> prefill_addresses;    // HOST:PORT
  std::vector<std::string> decode_addresses;
  std::chrono::milliseconds poll_interval{500};  // health + Info polling of each node
  FlowOptions flow;                              // node_timeout is also the polling calls' deadline
  std::optional<int> metrics_port;               // serve /metrics on host:port (0: any free port)
};

class RouterService {
 public:
  explicit RouterService(RouterOptions options);
  ~RouterService();
  RouterService(const RouterService&) = delete;
  RouterService& operator=(const RouterService&) = delete;

  // Loads the tokenizer, polls the nodes once, then serves. Returns the bound port.
  absl::StatusOr<int> start();
  // Stops accepting calls; calls still running after `grace` are cancelled (and their node calls
  // with them). Idempotent.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // Blocks until the server has shut down.
  void wait();

  std::string address() const;  // host:port once started
  std::string metrics_url() const;  // http://host:port/metrics, "" without --metrics-port
  const RouterStats& stats() const { return stats_; }
  NodePool& nodes() { return *pool_; }
  std::size_t running_requests() const { return running_.size(); }

 private:
  class BatonImpl;
  class RegistryImpl;

  const RouterOptions options_;
  RouterStats stats_;
  RunningRequests running_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<NodePool> pool_;
  std::unique_ptr<RequestFlow> flow_;
  std::unique_ptr<BatonImpl> baton_;
  std::unique_ptr<RegistryImpl> registry_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<metrics::MetricsServer> metrics_server_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::atomic<RouterMetrics*> live_metrics_{nullptr};  // set once metrics_ exists; read by request threads
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace baton::router
