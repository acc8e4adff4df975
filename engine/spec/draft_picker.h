// DraftPicker: how a model-based proposer turns a row of logits into a draft token.
//   - Greedy drafts (draft_sample_method = greedy): the argmax, one-hot. On the backend when the
//     logits are there (argmax_on_device: Backend::argmax_rows, only ids reach the host), or on
//     the host (pick()).
//   - Probabilistic drafts: a draw from the request's processed distribution q, with q appended to
//     the request's draft_probs; q is defined by the same processing as the target's sampler
//     (engine/sample/sampler.h: temperature, top-k/p, penalties over the output so far and the
//     drafts before this one), so the rejection sampler's acceptance rule keeps the output exact.
// Shared by the draft model, the EAGLE/MTP heads and Medusa. It owns no model and no KV.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/device_picks.h"
#include "engine/sample/sampler.h"
#include "engine/spec/proposer.h"
#include "engine/spec/proposer_factory.h"

namespace baton {

class DraftPicker {
 public:
  // Reads draft_sample_method and the target's vocabulary and EOS ids; sizes the device picks for
  // rows of up to max_rows logits rows per argmax_on_device() call.
  absl::Status init(const SpeculativeConfig& config, const ProposerContext& ctx, std::int32_t max_rows);

  bool probabilistic() const { return probabilistic_; }
  std::int32_t vocab() const { return vocab_; }

  // The draft from a row of logits over the target vocabulary (host): the argmax, or a draw from
  // q with q appended to p.draft_probs. -1 when no q can be made from the row (NaN, nothing
  // finite): the request drafts no further this step.
  std::int32_t pick(std::span<const float> target_logits, ProposalRequest& p);
  // Greedy drafting: each row of `logits` ([rows <= max_rows, any width] on the backend) reduced
  // to its argmax where it is; kArgmaxHasNaN / kArgmaxNoFinite for a row without one. Valid until
  // the next call.
  std::span<const std::int32_t> argmax_on_device(const TensorView& logits) { return picks_.argmax(logits); }

 private:
  bool probabilistic_ = false;
  std::int32_t vocab_ = 0;
  DevicePicks picks_;
  Sampler sampler_;
  std::vector<std::int32_t> eos_;
  std::vector<float> probs_;
  std::vector<std::int32_t> history_;
};

}  // namespace baton
