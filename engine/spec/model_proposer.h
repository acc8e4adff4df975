// TargetStateConsumer: what a proposer implements when it drafts from the target model's hidden
// states (EAGLE-1, EAGLE-3, MTP). The engine asks which states to capture in every target forward
// and hands each request's rows to observe() where the forward left them, on the backend; only
// rows of positions whose tokens are final (prompt, accepted drafts, the verified token) are valid.
// The rows stay there until the next target forward, which before_target_forward() announces: a
// consumer that reads them in the same step (the usual case) never copies them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/spec/proposer.h"
#include "kernels/backend.h"

namespace baton {

struct TargetStateSpec {
  std::vector<std::int32_t> layer_inputs;  // capture the residual stream entering these layers
  bool final_hidden = false;               // capture the final norm's output
  // Floats per token of the states side by side: one hidden vector per captured state, in the
  // order layer_inputs..., then final_hidden.
  std::int32_t width(std::int32_t hidden) const {
    return hidden * (static_cast<std::int32_t>(layer_inputs.size()) + (final_hidden ? 1 : 0));
  }
};

// One chunk's captured states in the target forward's buffers: the chunk's row r is row
// first_row + r of every tensor. Valid until the next target forward.
struct TargetStateRows {
  std::span<const TensorView> tensors;  // one per captured state, in TargetStateSpec order: [forward tokens, hidden] F32
  std::int64_t first_row = 0;
  std::uint64_t forward_id = 0;  // which target forward wrote them (counts up from 1)
};

class TargetStateConsumer {
 public:
  virtual ~TargetStateConsumer() = default;
  virtual TargetStateSpec target_states() const = 0;
  // rows: the states of positions [start, start + n) of the request; the first n_valid are final.
  // An error concerns this request only (its states do not follow on from what came before).
  virtual absl::Status observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                               std::int32_t n_valid) = 0;
  // The target is about to run a forward, which overwrites the rows observe() was given: copy
  // out what is still needed.
  virtual void before_target_forward() {}

  // ---- prefix caching ---------------------------------------------------------------------
  // A prefix-cache hit skips the target's forward over the cached positions, so their states
  // never arrive here. A consumer that keeps a cache of its own KV, keyed like the target's, says
  // so by returning true; the engine then asks it, for every prompt it admits, how much of the
  // target's hit it holds, and the target reuses only that much. False (the default): the engine
  // turns prefix caching off.
  virtual bool enable_prefix_cache() { return false; }
  // A request being admitted (no KV of its own yet) whose first `positions` positions (whole
  // blocks) the target's cache holds for `tokens` under the cache salt `salt`: takes the longest
  // run of them this consumer holds too and returns how many positions that is. Its KV of the
  // prompt's later positions is cached under the same salt as it becomes final.
  virtual std::int32_t adopt_cached_prefix(RequestKey /*key*/, std::span<const std::int32_t> /*tokens*/,
                                           std::uint64_t /*salt*/, std::int32_t /*positions*/) {
    return 0;
  }
  // The admission did not go ahead: give back what adopt_cached_prefix() took.
  virtual void release_cached_prefix(RequestKey /*key*/) {}
};

}  // namespace baton
