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
};

}  // namespace baton
