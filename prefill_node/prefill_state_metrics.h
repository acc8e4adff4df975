// baton_prefill_state_entered_total{state}: how many Prefill calls entered each state of the
// prefill node's state machine (prefill_service.h draws it), read from the service at scrape time.
//
// Must not: touch the engine or a job (it reads the service's counters only).
#pragma once

#include <utility>
#include <vector>

#include "metrics/families.h"
#include "prefill_node/prefill_service.h"
#include "prometheus/collectable.h"

namespace baton {

class PrefillStateCollector final : public prometheus::Collectable {
 public:
  // `labels`: the node's {method, role, node} (metrics::node_labels).
  PrefillStateCollector(const PrefillService& service, metrics::LabelPairs labels)
      : service_(service), labels_(std::move(labels)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    metrics::FamilyBuilder family("baton_prefill_state_entered_total",
                                  "Prefill calls that entered each state of the prefill node's state machine "
                                  "(checking, prefilling, flushing, committing, answered).",
                                  prometheus::MetricType::Counter);
    for (std::size_t i = 0; i < kPrefillStates; ++i) {
      const auto state = static_cast<PrefillState>(i);
      family.add(labels_, static_cast<double>(service_.entered(state)), {{"state", prefill_state_name(state)}});
    }
    return {family.build()};
  }

 private:
  const PrefillService& service_;
  const metrics::LabelPairs labels_;
};

}  // namespace baton
