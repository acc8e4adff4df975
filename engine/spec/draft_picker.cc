#include "engine/spec/draft_picker.h"

#include <algorithm>

namespace baton {

absl::Status DraftPicker::init(const SpeculativeConfig& config, const ProposerContext& ctx, std::int32_t max_rows) {
  probabilistic_ = config.draft_sample_method == DraftSampleMethod::kProbabilistic;
  eos_ = ctx.target_config->eos_token_ids;
  vocab_ = ctx.target_config->vocab_size;
  return picks_.allocate(*ctx.backend, max_rows);
}

std::int32_t DraftPicker::pick(std::span<const float> logits, ProposalRequest& p) {
  if (!probabilistic_) {
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const auto output = p.tokens.subspan(static_cast<std::size_t>(p.prompt_len));
  history_.assign(output.begin(), output.end());
  history_.insert(history_.end(), p.drafts->begin(), p.drafts->end());
  probs_.resize(logits.size());
  // A row q cannot be made from (NaN, nothing finite) ends this request's drafting for the step,
  // as a greedy row without an argmax does: drafts are only proposals.
  if (!sampler_.try_target_probs(logits, *p.sampling,
                                 TokenHistory{p.tokens.first(static_cast<std::size_t>(p.prompt_len)), history_}, eos_,
                                 probs_)
           .ok()) {
    return -1;
  }
  p.draft_probs->insert(p.draft_probs->end(), probs_.begin(), probs_.end());
  return Sampler::draw(probs_, *p.draft_rng);
}

}  // namespace baton
