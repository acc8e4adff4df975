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
// configured HttpServer asks for one before it calls dashboard_reply, unless --public-dashboard.
//
// Must not: hold state of its own (the router keeps the history) or block on a node.
#pragma once

#include <optional>
#include <string_view>

#include "nlohmann/json.hpp"
#include "http/http_listener.h"
#include "router/recent_requests.h"

namespace baton::router {
class RouterService;
}

namespace baton::router::http {

using baton::http::Reply;

// How far back /dashboard/data looks.
struct DashboardWindow {
  std::chrono::seconds span{60};  // the sliding window of the speculation figures
};

// The body of GET /dashboard/data at `now`.
nlohmann::json dashboard_data(RouterService& router, WallClock::time_point now, const DashboardWindow& window = {});

// The answer to GET `path` (without its query) if it is one of the routes above (an unknown file
// under /dashboard/ is a 404 without a body); nullopt for any other path.
std::optional<Reply> dashboard_reply(RouterService& router, std::string_view path);

}  // namespace baton::router::http
