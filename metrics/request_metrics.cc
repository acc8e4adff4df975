#include "metrics/request_metrics.h"

#include "metrics/names.h"

namespace baton::metrics {

namespace {

// vLLM's boundaries, with finer ones at the low end where a small model on a CPU lands.
const prometheus::Histogram::BucketBoundaries& ttft_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                                            0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
  return b;
}
const prometheus::Histogram::BucketBoundaries& token_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.05,
                                                            0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
  return b;
}
const prometheus::Histogram::BucketBoundaries& e2e_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0,
                                                            15.0, 20.0, 30.0, 60.0, 120.0, 240.0, 480.0, 960.0};
  return b;
}

}  // namespace

RequestMetrics::RequestMetrics(prometheus::Registry& registry, std::string node)
    : node_(std::move(node)),
      ttft_(prometheus::BuildHistogram().Name(kTimeToFirstToken).Help("Time to first token as the router streamed it, in seconds.").Register(registry)),
      tpot_(prometheus::BuildHistogram().Name(kTimePerOutputToken).Help("Per request: (end-to-end - TTFT) / (output tokens - 1), in seconds.").Register(registry)),
      itl_(prometheus::BuildHistogram().Name(kInterTokenLatency).Help("Gaps between streamed messages carrying tokens, in seconds.").Register(registry)),
      e2e_(prometheus::BuildHistogram().Name(kE2eLatency).Help("Router receipt to the request's last message, in seconds.").Register(registry)),
      success_(prometheus::BuildCounter().Name(kRequestSuccess).Help("Finished requests by finish reason.").Register(registry)),
      queue_(prometheus::BuildHistogram().Name(kRequestQueueTime).Help("Per request: router receipt to its first node call (waiting for room), in seconds.").Register(registry)),
      prefill_(prometheus::BuildHistogram().Name(kRequestPrefillTime).Help("Per request: its prefill, on the prefill node or locally on the decode node, in seconds.").Register(registry)),
      kv_transfer_(prometheus::BuildHistogram().Name(kRequestKvTransferTime).Help("Per disaggregated request: its KV's transfer, first byte posted to the decode node's commit, in seconds.").Register(registry)),
      decode_(prometheus::BuildHistogram().Name(kRequestDecodeTime).Help("Per request: first token to last message, in seconds.").Register(registry)),
      running_(&prometheus::BuildGauge().Name(kRouterRequestsRunning).Help("Generate calls the router is serving.")
                    .Register(registry).Add({{"method", "all"}, {"role", "router"}, {"node", node_}})) {}

void RequestMetrics::observe(const RequestObservation& r) {
  const prometheus::Labels labels = {{"method", r.method}, {"role", "router"}, {"node", node_}};
  prometheus::Labels reason = labels;
  reason["finished_reason"] = r.finished_reason;
  success_.Add(reason).Increment();
  if (!r.got_first_token) return;
  ttft_.Add(labels, ttft_buckets()).Observe(r.ttft_s);
  e2e_.Add(labels, e2e_buckets()).Observe(r.e2e_s);
  if (r.output_tokens > 1) {
    tpot_.Add(labels, token_buckets()).Observe((r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
  }
  prometheus::Histogram& itl = itl_.Add(labels, token_buckets());
  for (double gap : r.inter_token_s) itl.Observe(gap);
  if (r.queue_s >= 0) queue_.Add(labels, e2e_buckets()).Observe(r.queue_s);
  if (r.prefill_s >= 0) prefill_.Add(labels, ttft_buckets()).Observe(r.prefill_s);
  if (r.kv_transfer_s >= 0) kv_transfer_.Add(labels, ttft_buckets()).Observe(r.kv_transfer_s);
  if (r.decode_s >= 0) decode_.Add(labels, e2e_buckets()).Observe(r.decode_s);
}

}  // namespace baton::metrics
