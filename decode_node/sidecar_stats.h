// SidecarStats: what a decode node counts about its proposer sidecar, in one small struct (a later
// change exports it to Prometheus): steps drafted remotely and locally, budget misses,
// reconnects and round-trip times. Written by the engine thread and the connection thread,
// read by Info (any thread): atomics only.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "baton/v1/node.pb.h"

namespace baton {

struct SidecarStats {
  std::string endpoint;
  std::atomic<bool> connected{false};
  std::atomic<std::int64_t> remote_steps{0};
  std::atomic<std::int64_t> remote_proposals{0};
  std::atomic<std::int64_t> budget_misses{0};
  std::atomic<std::int64_t> fallback_steps{0};
  std::atomic<std::int64_t> reconnects{0};
  std::atomic<std::int64_t> rtt_count{0};
  std::atomic<std::int64_t> rtt_sum_ns{0};
  std::atomic<std::int64_t> rtt_max_ns{0};

  void record_rtt(std::int64_t ns) {
    ++rtt_count;
    rtt_sum_ns += ns;
    std::int64_t seen = rtt_max_ns.load();
    while (ns > seen && !rtt_max_ns.compare_exchange_weak(seen, ns)) {
    }
  }

  void fill(node::v1::ProposerSidecarStats* out) const {
    out->set_endpoint(endpoint);
    out->set_connected(connected.load());
    out->set_remote_steps(remote_steps.load());
    out->set_remote_proposals(remote_proposals.load());
    out->set_budget_misses(budget_misses.load());
    out->set_fallback_steps(fallback_steps.load());
    out->set_reconnects(reconnects.load());
    const std::int64_t n = rtt_count.load();
    out->set_rtt_count(n);
    out->set_rtt_mean_us(n > 0 ? static_cast<double>(rtt_sum_ns.load()) / static_cast<double>(n) / 1e3 : 0.0);
    out->set_rtt_max_us(static_cast<double>(rtt_max_ns.load()) / 1e3);
  }
};

}  // namespace baton
