#include "router/router_metrics.h"

#include <algorithm>

#include "metrics/families.h"
#include "prometheus/collectable.h"

namespace baton::router {

namespace {

using prometheus::MetricType;

// RouterStats at scrape time.
class StatsCollector final : public prometheus::Collectable {
 public:
  StatsCollector(const RouterStats& stats, const RunningRequests& running, std::string node)
      : stats_(stats), running_(running), base_({{"method", "all"}, {"role", "router"}, {"node", std::move(node)}}) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    auto v = [](const std::atomic<std::int64_t>& a) { return static_cast<double>(a.load(std::memory_order_relaxed)); };
    std::vector<prometheus::MetricFamily> out;
    auto counter = [&](const char* name, const char* help, double value) {
      out.push_back(metrics::FamilyBuilder(name, help, MetricType::Counter).add(base_, value).build());
    };
    counter("baton_router_requests_total", "Generate requests whose prompt the router accepted.", v(stats_.requests));
    counter("baton_router_requests_failed_total", "Requests that ended with an error status.", v(stats_.requests_failed));
    counter("baton_router_requests_aborted_total", "Requests aborted (Abort RPC, client gone, deadline).",
            v(stats_.requests_aborted));
    counter("baton_router_disaggregated_total", "Attempts prefilled on a prefill node.", v(stats_.disaggregated));
    counter("baton_router_retries_total", "Second attempts after a failure before the first token.", v(stats_.retries));
    out.push_back(metrics::FamilyBuilder("baton_router_node_calls_ended_total",
                                         "Node calls the router ended itself, by reason: the stream sent nothing for "
                                         "--stream-progress-timeout-ms, or the node stopped answering health checks.",
                                         MetricType::Counter)
                      .add(base_, v(stats_.calls_stalled), {{"reason", "no_progress"}})
                      .add(base_, v(stats_.calls_node_unreachable), {{"reason", "node_unreachable"}})
                      .build());
    {
      metrics::FamilyBuilder states("baton_router_request_state_entered_total",
                                    "Transitions of requests into each state of the router's request machine "
                                    "(received, queued, admitted, reserving, prefilling, streaming, finished, failed).",
                                    MetricType::Counter);
      for (std::size_t i = 0; i < kRequestStates; ++i) {
        states.add(base_, v(stats_.entered[i]), {{"state", state_name(static_cast<RequestState>(i))}});
      }
      out.push_back(states.build());
    }
    out.push_back(metrics::FamilyBuilder("baton_router_local_prefills_total",
                                         "Requests the router sent to a decode node to prefill locally, by reason.",
                                         MetricType::Counter)
                      .add(base_, v(stats_.local_prefill_forced), {{"reason", "forced"}})
                      .add(base_, v(stats_.local_prefill_short_prompt), {{"reason", "short_prompt"}})
                      .add(base_, v(stats_.local_prefill_no_prefill_node), {{"reason", "no_prefill_node"}})
                      .build());
    const AdmissionCounts a = running_.counts();
    const auto d = [](std::int64_t x) { return static_cast<double>(x); };
    out.push_back(metrics::FamilyBuilder("baton_router_requests_queued",
                                         "Requests waiting for room (--max-running-requests, per key) right now.",
                                         MetricType::Gauge)
                      .add(base_, d(static_cast<std::int64_t>(running_.queued())))
                      .build());
    const RunningLimits limits = running_.limits();
    out.push_back(metrics::FamilyBuilder("baton_router_admission_limit",
                                         "The admission limits in force (0: none): requests running at once, "
                                         "waiting for room, and running per API key; set by flag or derived from "
                                         "the decode nodes' batch slots.",
                                         MetricType::Gauge)
                      .add(base_, d(static_cast<std::int64_t>(limits.max_running)), {{"limit", "running"}})
                      .add(base_, d(static_cast<std::int64_t>(limits.max_queued)), {{"limit", "queued"}})
                      .add(base_, d(static_cast<std::int64_t>(limits.max_per_owner)), {{"limit", "per_key"}})
                      .build());
    out.push_back(metrics::FamilyBuilder("baton_router_requests_admitted_total",
                                         "Requests admitted to run: at once, or after waiting in the queue.",
                                         MetricType::Counter)
                      .add(base_, d(a.admitted - a.admitted_after_wait), {{"wait", "none"}})
                      .add(base_, d(a.admitted_after_wait), {{"wait", "queued"}})
                      .build());
    out.push_back(metrics::FamilyBuilder("baton_router_requests_rejected_total",
                                         "Requests refused for room: the queue was full, they waited "
                                         "--queue-timeout-ms, or they left the queue (client gone, draining).",
                                         MetricType::Counter)
                      .add(base_, d(a.queue_full), {{"reason", "queue_full"}})
                      .add(base_, d(a.queue_timeout), {{"reason", "queue_timeout"}})
                      .add(base_, d(a.left_queue), {{"reason", "left_queue"}})
                      .build());
    return out;
  }

 private:
  const RouterStats& stats_;
  const RunningRequests& running_;
  const metrics::LabelPairs base_;
};

const char* reason_name(baton::v1::FinishReason r) {
  switch (r) {
    case baton::v1::FINISH_REASON_STOP:
      return "stop";
    case baton::v1::FINISH_REASON_LENGTH:
      return "length";
    case baton::v1::FINISH_REASON_ABORT:
      return "abort";
    default:
      return "error";
  }
}

}  // namespace

RouterMetrics::RouterMetrics(metrics::MetricsServer& server, const RouterStats& stats, const RunningRequests& running,
                             std::string node)
    : requests_(server.registry(), node) {
  server.add(std::make_shared<StatsCollector>(stats, running, std::move(node)));
}

std::string method_of(const NodePool& pool, const std::string& decode_address) {
  for (const NodeStatus& n : pool.status()) {
    if (n.kind != NodeKind::kPrefill && n.address == decode_address && n.info && !n.info->speculative_method().empty()) {
      return n.info->speculative_method();
    }
  }
  return "none";
}

MeasuringSink::MeasuringSink(ResponseSink& inner, RecentRequests& recent, const NodePool& pool,
                             RouterMetrics* metrics, Clock::time_point received)
    : inner_(inner), recent_(recent), pool_(pool), metrics_(metrics), received_(received) {
  if (metrics_) metrics_->requests().running().Increment();
}

void MeasuringSink::write(const baton::v1::GenerateResponse& response, std::function<void(bool)> sent) {
  const Clock::time_point now = Clock::now();
  if (response.token_ids_size() > 0) {
    if (!obs_.got_first_token) {
      obs_.got_first_token = true;
      obs_.ttft_s = std::chrono::duration<double>(now - received_).count();
    } else if (metrics_ != nullptr) {  // only the Prometheus histogram wants every gap
      obs_.inter_token_s.push_back(std::chrono::duration<double>(now - last_token_).count());
    }
    last_token_ = now;
    obs_.output_tokens += response.token_ids_size();
  }
  if (response.finish_reason() != baton::v1::FINISH_REASON_UNSPECIFIED) {
    finished_ = true;
    obs_.finished_reason = reason_name(response.finish_reason());
    obs_.e2e_s = std::chrono::duration<double>(now - received_).count();
    decode_node_ = response.usage().decode_node();
    // The phases, from the usage the router filled in (only a request that ran has them).
    const baton::v1::Usage& u = response.usage();
    if (u.has_timings() && obs_.got_first_token) {
      obs_.queue_s = u.timings().router_queue_ms() / 1e3;
      obs_.prefill_s = u.timings().prefill_ms() / 1e3;
      if (!u.local_prefill()) obs_.kv_transfer_s = u.timings().kv_transfer_ms() / 1e3;
      obs_.decode_s = std::max(0.0, obs_.e2e_s - obs_.ttft_s);
    }
  }
  inner_.write(response, std::move(sent));
}

MeasuringSink::~MeasuringSink() {
  if (!finished_) {
    obs_.finished_reason = status_.error_code() == grpc::StatusCode::CANCELLED ? "abort" : "error";
    obs_.e2e_s = std::chrono::duration<double>(Clock::now() - received_).count();
  }
  FinishedRequest finished;
  finished.ended = WallClock::now();
  finished.got_first_token = obs_.got_first_token;
  finished.ttft_s = obs_.ttft_s;
  finished.e2e_s = obs_.e2e_s;
  finished.output_tokens = obs_.output_tokens;
  recent_.record(finished);
  if (metrics_ == nullptr) return;
  metrics_->requests().running().Decrement();
  obs_.method = decode_node_.empty() ? "none" : method_of(pool_, decode_node_);
  metrics_->requests().observe(obs_);
}

}  // namespace baton::router
