#include "router/admission_limits.h"

#include <algorithm>

namespace baton::router {

std::size_t decode_batch_slots(const DecodeCapacity& node) {
  const auto kv_blocks = static_cast<std::size_t>(std::max(0, node.kv_blocks));
  if (node.max_num_seqs <= 0) return kv_blocks;
  return std::min(static_cast<std::size_t>(node.max_num_seqs), kv_blocks);
}

DerivedLimits derive_limits(const std::vector<DecodeCapacity>& decode_nodes) {
  DerivedLimits out;
  for (const DecodeCapacity& n : decode_nodes) out.decode_slots += decode_batch_slots(n);
  out.max_running = std::clamp<std::size_t>(2 * out.decode_slots, kMinRunning, kMaxDerivedRunning);
  out.max_queued = std::clamp<std::size_t>(out.decode_slots, kMinQueued, kMaxDerivedQueued);
  return out;
}

RunningLimits effective_limits(std::optional<std::size_t> max_running, std::optional<std::size_t> max_queued,
                               std::size_t max_per_owner, std::chrono::milliseconds queue_timeout,
                               const DerivedLimits& derived) {
  RunningLimits l;
  l.max_running = max_running.value_or(derived.max_running);
  l.max_queued = max_queued.value_or(derived.max_queued);
  l.max_per_owner = max_per_owner;
  l.queue_timeout = queue_timeout;
  return l;
}

}  // namespace baton::router
