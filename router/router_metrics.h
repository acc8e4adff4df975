// The router's Prometheus metrics: each request's TTFT, TPOT, inter-token latency and end-to-end
// latency as the router streamed it (metrics/request_metrics.h), labelled with the speculative
// method of the decode node that served it, and the router's counters (RouterStats) at scrape
// time.
//
// MeasuringSink wraps the sink a request's messages go to and observes the request when it ends:
// always into the router's RecentRequests (the /dashboard page), and into the Prometheus
// instruments when metrics are on. The HTTP and gRPC front ends both use it. Must not: change or
// delay a message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "metrics/metrics_server.h"
#include "metrics/request_metrics.h"
#include "router/node_pool.h"
#include "router/recent_requests.h"
#include "router/request_flow.h"
#include "router/router_stats.h"
#include "router/running_requests.h"

namespace baton::router {

class RouterMetrics {
 public:
  // Registers the instruments and a collector of `stats` and `running`'s admission counts (both
  // must outlive the server).
  RouterMetrics(metrics::MetricsServer& server, const RouterStats& stats, const RunningRequests& running,
                std::string node);
  metrics::RequestMetrics& requests() { return requests_; }

 private:
  metrics::RequestMetrics requests_;
};

// The speculative method of the decode node at `address` ("none" when it has none or is gone).
std::string method_of(const NodePool& pool, const std::string& decode_address);

class MeasuringSink final : public ResponseSink {
 public:
  // metrics may be null (no /metrics); recent and pool must outlive the sink.
  MeasuringSink(ResponseSink& inner, RecentRequests& recent, const NodePool& pool, RouterMetrics* metrics,
                Clock::time_point received);
  ~MeasuringSink() override;  // observes the request
  void write(const baton::v1::GenerateResponse& response, std::function<void(bool)> sent) override;
  // The request's status as the front end returns it (a request may end without a final message).
  void set_status(const grpc::Status& status) { status_ = status; }

 private:
  ResponseSink& inner_;
  RecentRequests& recent_;
  const NodePool& pool_;
  RouterMetrics* metrics_;
  const Clock::time_point received_;
  Clock::time_point last_token_{};
  metrics::RequestObservation obs_;
  std::string decode_node_;
  bool finished_ = false;
  grpc::Status status_;
};

}  // namespace baton::router
