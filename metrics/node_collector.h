// NodeCollector: a node's engine state and counters as metric families, read at scrape time from
// the same NodeInfo snapshot the router polls (so /metrics and Info never disagree): requests
// running and waiting, queued prefill tokens, KV blocks per pool and state, token, preemption,
// lease-expiry and fault counters, local-prefill fallbacks, KV bytes sent, and the speculative
// decoding counters with acceptance per draft position.
//
// Labels: method (speculative method or "none"), role and node (the node's address) on every
// series; pool and state, or position, where they apply.
//
// A scrape that finds the engine busy (the snapshot function's bounded wait runs out, e.g. behind a
// long prefill step) exports the last snapshot it got, so no series drops out of a scrape and
// an autoscaler's input has no gaps under load; baton_node_snapshot_age_seconds says how old the
// exported values are (0 when fresh).
//
// Must not: touch the engine (the snapshot function does, with its own bounded wait); invent a
// value when no snapshot was ever taken (then it exports nothing).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
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
  mutable std::mutex mu_;  // guards the last snapshot (scrapes may overlap)
  mutable std::optional<node::v1::NodeInfo> last_;
  mutable std::chrono::steady_clock::time_point last_time_;
};

}  // namespace baton::metrics
