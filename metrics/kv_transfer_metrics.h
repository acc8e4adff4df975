// KvTransferMetrics: a prefill node's KV transfers as they end — seconds from the prompt's last
// layer computed to the commit acknowledged (histogram), and failures by stage (begin: connecting
// or validating the destination; transfer: the puts or their flush; commit: the decode node refused
// or did not answer). Bytes are counted from the node's snapshot (node_collector.h).
//
// Thread-safe. Must not: be told about a transfer twice.
#pragma once

#include <string>

#include "metrics/families.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace baton::metrics {

class KvTransferMetrics {
 public:
  KvTransferMetrics(prometheus::Registry& registry, const LabelPairs& base);
  void succeeded(double seconds) { seconds_->Observe(seconds); }
  void failed(const std::string& stage);

 private:
  prometheus::Labels base_;
  prometheus::Histogram* seconds_;
  prometheus::Family<prometheus::Counter>& failures_;
};

}  // namespace baton::metrics
