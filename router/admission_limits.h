// The router's admission limits when the operator sets none: derived from what the decode nodes
// report (NodeInfo.max_num_seqs and their KV pools), and followed as nodes come, go or restart
// with other settings.
//
// A decode node's batch holds at most min(max_num_seqs, KV blocks) requests: a step runs at most
// max_num_seqs, and each running request holds at least one block of its KV. The router lets
// twice the usable nodes' batches run at once — the one being decoded and the next, so that a
// node whose request finishes finds another already waiting for its slot instead of idling for a
// round trip through the router — and one more batch per node wait in its own queue (with its
// deadline). Past that, requests are refused at once (HTTP 429, RESOURCE_EXHAUSTED), which is
// what a client wants rather than a wait whose end no node can serve. With no decode node
// reporting yet the limits are kMinRunning and kMinQueued: what more would wait for is a node.
//
// Must not: call nodes or take locks; it is a pure function of the decode nodes' capacities.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "router/node_pool.h"
#include "router/running_requests.h"

namespace baton::router {

struct DerivedLimits {
  std::size_t max_running = 0;
  std::size_t max_queued = 0;
  std::size_t decode_slots = 0;  // the usable decode nodes' batches together (what the two derive from)
};

inline constexpr std::size_t kMinRunning = 16;
inline constexpr std::size_t kMinQueued = 16;
// Derived limits stop here (a cap on what one router holds, not on the nodes).
inline constexpr std::size_t kMaxDerivedRunning = 8192;
inline constexpr std::size_t kMaxDerivedQueued = 8192;

// The slots of one decode node's batch: min(max_num_seqs, target KV blocks); a node that reports
// no max_num_seqs (an older node) counts its KV blocks alone.
std::size_t decode_batch_slots(const DecodeCapacity& node);

// The limits for the usable decode nodes (NodePool::decode_capacities()).
DerivedLimits derive_limits(const std::vector<DecodeCapacity>& decode_nodes);

// The limits the router runs with: the operator's where set, else the derived ones.
RunningLimits effective_limits(std::optional<std::size_t> max_running, std::optional<std::size_t> max_queued,
                               std::size_t max_per_owner, std::chrono::milliseconds queue_timeout,
                               const DerivedLimits& derived);

}  // namespace baton::router
