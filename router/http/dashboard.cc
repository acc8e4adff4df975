#include "router/http/dashboard.h"

#include <optional>

#include "router/http/embedded_files.h"
#include "router/router_service.h"

namespace baton::router::http {
namespace {

using nlohmann::json;

double unix_s(WallClock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

json or_null(const std::optional<double>& v, double scale = 1) { return v ? json(*v * scale) : json(nullptr); }

json counts_json(const SpecCounts& c) {
  return {{"num_drafts", c.num_drafts},
          {"num_draft_tokens", c.num_draft_tokens},
          {"num_accepted_tokens", c.num_accepted_tokens},
          {"accepted_per_position", c.accepted_per_position},
          {"acceptance_rate", or_null(c.acceptance_rate())},
          {"mean_acceptance_length", or_null(c.mean_acceptance_length())},
          {"per_position_rates", c.per_position_rates()}};
}

json requests_json(const RecentRequests& recent, WallClock::time_point now) {
  json t = json::array(), requests = json::array(), tokens = json::array(), rps = json::array(), tps = json::array();
  json ttft50 = json::array(), ttft99 = json::array(), tpot50 = json::array(), tpot99 = json::array();
  for (const RequestBucket& b : recent.buckets(now)) {
    t.push_back(unix_s(b.start));
    requests.push_back(b.requests);
    tokens.push_back(b.output_tokens);
    rps.push_back(b.requests_per_s);
    tps.push_back(b.output_tokens_per_s);
    ttft50.push_back(or_null(b.ttft_p50_s, 1e3));
    ttft99.push_back(or_null(b.ttft_p99_s, 1e3));
    tpot50.push_back(or_null(b.tpot_p50_s, 1e3));
    tpot99.push_back(or_null(b.tpot_p99_s, 1e3));
  }
  return {{"t", t},
          {"requests", requests},
          {"output_tokens", tokens},
          {"requests_per_s", rps},
          {"output_tokens_per_s", tps},
          {"ttft_p50_ms", ttft50},
          {"ttft_p99_ms", ttft99},
          {"tpot_p50_ms", tpot50},
          {"tpot_p99_ms", tpot99}};
}

json speculation_json(const SpecHistory& history, const RecentRequestsOptions& buckets, WallClock::time_point now,
                      const DashboardWindow& window) {
  const SpecHistory::MethodSeries series = history.by_method(now, window.span, buckets.bucket_width, buckets.num_buckets);
  json t = json::array();
  for (WallClock::time_point s : series.starts) t.push_back(unix_s(s));
  json methods = json::array();
  for (const SpecHistory::MethodSpec& m : series.methods) {
    json rate = json::array(), length = json::array();
    for (const SpecCounts& b : m.buckets) {
      rate.push_back(or_null(b.acceptance_rate()));
      length.push_back(or_null(b.mean_acceptance_length()));
    }
    methods.push_back({{"method", m.method},
                       {"num_speculative_tokens", m.num_speculative_tokens},
                       {"acceptance_rate", rate},
                       {"mean_acceptance_length", length},
                       {"window", counts_json(m.window)}});
  }
  json nodes = json::array();
  for (const SpecHistory::NodeSpec& n : history.nodes(now, window.span)) {
    nodes.push_back({{"address", n.address},
                     {"method", n.method},
                     {"num_speculative_tokens", n.num_speculative_tokens},
                     {"window", counts_json(n.window)},
                     {"since_start", counts_json(n.since_start)}});
  }
  return {{"t", t}, {"methods", methods}, {"nodes", nodes}};
}

json nodes_json(const NodePool& pool) {
  json out = json::array();
  for (const NodeStatus& n : pool.status()) {
    json node = {{"address", n.address},
                 {"kind", n.kind == NodeKind::kPrefill ? "prefill" : "decode"},
                 {"usable", n.usable},
                 {"problem", n.problem}};
    if (n.info) {
      node["role"] = n.info->role();
      node["method"] = n.info->speculative_method().empty() ? "none" : n.info->speculative_method();
      node["num_running"] = n.info->load().num_running();
      node["num_waiting"] = n.info->load().num_waiting();
      node["num_speculative_tokens"] = n.info->num_speculative_tokens();
      // The resolved config says whether k adapts and whether a sidecar proposes.
      const json config = json::parse(n.info->speculative_config(), nullptr, false);
      if (config.is_object()) {
        node["adaptive_draft_length"] = config.value("adaptive_draft_length", false);
        if (auto e = config.find("proposer_endpoint"); e != config.end() && e->is_string()) {
          node["proposer_endpoint"] = *e;
        }
      }
    }
    out.push_back(std::move(node));
  }
  return out;
}

// JSON inside <script type="application/json">: every "<" (they occur only inside strings) as
// \u003c, so no text in the data can close the element or open a comment.
std::string script_safe(const json& data) {
  const std::string text = data.dump();
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

std::string content_type(std::string_view name) {
  auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  return "text/plain; charset=utf-8";
}

const EmbeddedFile* find_file(std::string_view name) {
  for (const EmbeddedFile& f : dashboard_files()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Reply file_reply(const EmbeddedFile& f) {
  Reply r;
  r.content_type = content_type(f.name);
  r.body = std::string(f.content);
  return r;
}

}  // namespace

json dashboard_data(RouterService& router, WallClock::time_point now, const DashboardWindow& window) {
  const RecentRequests& recent = router.recent_requests();
  return {{"generated_at", unix_s(now)},
          {"bucket_s", recent.options().bucket_width.count()},
          {"window_s", window.span.count()},
          {"model", router.served_model_name()},
          {"running_requests", router.running_requests()},
          {"requests", requests_json(recent, now)},
          {"speculation", speculation_json(router.spec_history(), recent.options(), now, window)},
          {"nodes", nodes_json(router.nodes())}};
}

std::optional<Reply> dashboard_reply(RouterService& router, std::string_view path) {
  if (path == "/dashboard" || path == "/dashboard/") {
    // The page carries the data as of now, so it draws before its first poll returns (and a
    // screenshot taken at load shows the charts, not "loading…").
    Reply page = file_reply(*find_file("index.html"));
    constexpr std::string_view kSlot = "{{INITIAL_DATA}}";
    const std::size_t at = page.body.find(kSlot);
    if (at != std::string::npos) page.body.replace(at, kSlot.size(), script_safe(dashboard_data(router, WallClock::now())));
    page.headers.emplace_back("Cache-Control", "no-store");
    return page;
  }
  if (path == "/dashboard/data") {
    Reply r;
    r.headers.emplace_back("Cache-Control", "no-store");
    r.body = dashboard_data(router, WallClock::now()).dump();
    return r;
  }
  constexpr std::string_view kPrefix = "/dashboard/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  // The page's other files; anything else under /dashboard/ is 404.
  if (const EmbeddedFile* f = find_file(path.substr(kPrefix.size()))) return file_reply(*f);
  Reply missing;
  missing.status = 404;
  return missing;
}

}  // namespace baton::router::http
