// NodeCollector: a node's engine state and counters as metric families, read at scrape time from
// the same NodeInfo snapshot the router polls (so /metrics and Info never disagree): requests
// running and waiting, queued prefill tokens, KV blocks per pool and state, token, preemption,
// lease-expiry and fault counters, local-prefill fallbacks, KV bytes sent, and the speculative
// decoding counters with acceptance per draft position.
//
// Labels: method (speculative method or "none"), role and node (the node's address) on every
// series; pool and state, or position, where they apply.
//
// Must not: touch the engine (the snapshot function does, with its own bounded wait); invent a
// value when the snapshot is missing (then it exports nothing).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "baton/v1/node.pb.h"
#include "metrics/families.h"
#include "prometheus/collectable.h"

namespace baton::metrics {

// The {method, role, node} labels of a node.
LabelPairs node_labels(const node::v1::NodeInfo& info);

// The families of one snapshot (exposed for tests).
std::vector<prometheus::MetricFamily> node_families(const node::v1::NodeInfo& info);

class NodeCollector final : public prometheus::Collectable {
 public:
  using Snapshot = std::function<std::optional<node::v1::NodeInfo>()>;
  explicit NodeCollector(Snapshot snapshot) : snapshot_(std::move(snapshot)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Snapshot snapshot_;
};

}  // namespace baton::metrics
