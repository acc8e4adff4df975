#include "engine/spec/proposer_factory.h"

#include "common/status.h"
#include "engine/spec/draft_model_proposer.h"
#include "engine/spec/head_proposer.h"
#include "engine/spec/ngram_proposer.h"
#include "engine/spec/suffix_proposer.h"

namespace baton {

absl::StatusOr<std::unique_ptr<Proposer>> make_proposer(const SpeculativeConfig& config, const ProposerContext& context) {
  if (config.num_speculative_tokens < 1 && config.method != SpecMethod::kMtp) {
    return absl::InvalidArgumentError("speculative_config: `num_speculative_tokens` must be >= 1 to speculate");
  }
  switch (config.method) {
    case SpecMethod::kNgram:
      return std::unique_ptr<Proposer>(std::make_unique<NgramProposer>(
          config.prompt_lookup_min, config.prompt_lookup_max, config.num_speculative_tokens));
    case SpecMethod::kSuffix: {
      SuffixProposerConfig sc;
      sc.max_tree_depth = config.suffix_decoding_max_tree_depth;
      sc.max_cached_requests = config.suffix_decoding_max_cached_requests;
      sc.max_spec_factor = config.suffix_decoding_max_spec_factor;
      sc.min_token_prob = config.suffix_decoding_min_token_prob;
      sc.max_spec_tokens = config.num_speculative_tokens;
      return std::unique_ptr<Proposer>(std::make_unique<SuffixProposer>(sc));
    }
    case SpecMethod::kDraftModel: {
      BATON_ASSIGN_OR_RETURN(auto p, DraftModelProposer::create(config, context));
      return std::unique_ptr<Proposer>(std::move(p));
    }
    case SpecMethod::kEagle:
    case SpecMethod::kEagle3:
    case SpecMethod::kMtp: {
      BATON_ASSIGN_OR_RETURN(auto p, HeadProposer::create(config, context));
      return std::unique_ptr<Proposer>(std::move(p));
    }
  }
  return absl::InternalError("unknown speculative method");
}

}  // namespace baton
