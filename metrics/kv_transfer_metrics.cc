#include "metrics/kv_transfer_metrics.h"

#include "metrics/names.h"

namespace baton::metrics {

namespace {

prometheus::Labels to_labels(const LabelPairs& pairs) {
  prometheus::Labels out;
  for (const auto& [k, v] : pairs) out[k] = v;
  return out;
}

}  // namespace

KvTransferMetrics::KvTransferMetrics(prometheus::Registry& registry, const LabelPairs& base)
    : base_(to_labels(base)),
      seconds_(&prometheus::BuildHistogram()
                    .Name(kKvTransferSeconds)
                    .Help("KV transfer time per request: the prompt's last layer computed to the commit acknowledged, in seconds.")
                    .Register(registry)
                    .Add(base_, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0})),
      failures_(prometheus::BuildCounter()
                    .Name(kKvTransferFailures)
                    .Help("KV transfers that failed, by stage (begin, transfer, commit).")
                    .Register(registry)) {
  // Every stage exists from the start, so rate() has a series before the first failure.
  for (const char* stage : {"begin", "transfer", "commit"}) {
    prometheus::Labels l = base_;
    l["stage"] = stage;
    failures_.Add(l);
  }
}

void KvTransferMetrics::failed(const std::string& stage) {
  prometheus::Labels l = base_;
  l["stage"] = stage;
  failures_.Add(l).Increment();
}

}  // namespace baton::metrics
