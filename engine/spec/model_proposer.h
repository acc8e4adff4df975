// TargetStateConsumer: what a proposer implements when it drafts from the target model's hidden
// states (EAGLE-1, EAGLE-3, MTP). The engine asks which states to capture in every target forward
// and hands each request's rows to observe(); only rows of positions whose tokens are final
// (prompt, accepted drafts, the verified token) are valid.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/spec/proposer.h"

namespace baton {

struct TargetStateSpec {
  std::vector<std::int32_t> layer_inputs;  // capture the residual stream entering these layers
  bool final_hidden = false;               // capture the final norm's output
  // Floats per token in observe()'s rows: one hidden vector per captured state, in the order
  // layer_inputs..., then final_hidden.
  std::int32_t width(std::int32_t hidden) const {
    return hidden * (static_cast<std::int32_t>(layer_inputs.size()) + (final_hidden ? 1 : 0));
  }
};

class TargetStateConsumer {
 public:
  virtual ~TargetStateConsumer() = default;
  virtual TargetStateSpec target_states() const = 0;
  // rows: [n, width] for positions [start, start + n) of the request; the first n_valid are final.
  // An error concerns this request only (its states do not follow on from what came before).
  virtual absl::Status observe(RequestKey key, std::int32_t start, std::span<const float> rows, std::int32_t n,
                               std::int32_t n_valid) = 0;
};

}  // namespace baton
