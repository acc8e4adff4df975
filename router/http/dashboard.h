// The router's live page: GET /dashboard (an HTML page drawing charts with the vendored uPlot),
// GET /dashboard/FILE (its script, uPlot and its stylesheet, compiled into the binary:
// embedded_files.h) and GET /dashboard/data (JSON the page polls every 1.5 s). Everything comes
// from the router's own view of the cluster — no Prometheus needed:
//   - requests: TTFT and TPOT (p50, p99), requests/s and output tokens/s per 5 s bucket over the
//     last 5 minutes, from the requests the router itself finished (RecentRequests);
//   - speculation: acceptance rate per method per bucket, and over the last minute per method and
//     per decode node the acceptance rate, mean acceptance length and acceptance per draft
//     position, from the differences of the counters the decode nodes report in Info
//     (SpecHistory);
//   - nodes: each node's usability and load as last polled.
// They show no prompt or output, only counts, latencies and node addresses; with API keys
// configured they need one (HttpServer passes its check as `allowed`) unless --public-dashboard.
//
// Must not: hold state of its own (the router keeps the history) or block on a node.
#pragma once

#include <functional>
#include <string>

#include "nlohmann/json.hpp"
#include "router/recent_requests.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace baton::router {
class RouterService;
}

namespace baton::router::http {

// How far back /dashboard/data looks.
struct DashboardWindow {
  std::chrono::seconds span{60};  // the sliding window of the speculation figures
};

// The body of GET /dashboard/data at `now`.
nlohmann::json dashboard_data(RouterService& router, WallClock::time_point now, const DashboardWindow& window = {});

// Adds the routes above to `server`; each serves only when `allowed` returns true (else `allowed`
// has answered the request).
void add_dashboard_routes(httplib::Server& server, RouterService& router,
                          std::function<bool(const httplib::Request&, httplib::Response&)> allowed);

}  // namespace baton::router::http
