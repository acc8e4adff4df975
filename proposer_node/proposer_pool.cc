#include "proposer_node/proposer_pool.h"

#include <functional>

#include "common/status.h"
#include "engine/spec/ngram_proposer.h"
#include "engine/spec/suffix_proposer.h"

namespace baton {

absl::StatusOr<std::shared_ptr<SharedProposer>> ProposerPool::acquire(const SpeculativeConfig& c) {
  std::string id;
  std::function<std::unique_ptr<Proposer>()> make;
  if (c.method == SpecMethod::kNgram) {
    id = str_cat("ngram k=", c.num_speculative_tokens, " n=[", c.prompt_lookup_min, ",", c.prompt_lookup_max, "]");
    make = [c] { return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max, c.num_speculative_tokens); };
  } else if (c.method == SpecMethod::kSuffix) {
    SuffixProposerConfig s;
    s.max_spec_tokens = c.num_speculative_tokens;
    s.max_tree_depth = c.suffix_decoding_max_tree_depth;
    s.max_cached_requests = options_.max_cached_requests;
    s.max_spec_factor = c.suffix_decoding_max_spec_factor;
    s.min_token_prob = c.suffix_decoding_min_token_prob;
    id = str_cat("suffix k=", s.max_spec_tokens, " depth=", s.max_tree_depth, " factor=", s.max_spec_factor,
                 " min_prob=", s.min_token_prob, " cached=", s.max_cached_requests);
    make = [s] { return std::make_unique<SuffixProposer>(s); };
  } else {
    return absl::InvalidArgumentError(str_cat("the proposer sidecar serves methods ngram and suffix, not ",
                                              spec_method_name(c.method)));
  }
  auto fresh = [&] {
    auto p = std::make_shared<SharedProposer>();
    p->proposer = make();
    p->description = id;
    return p;
  };
  if (options_.scope == CacheScope::kNode) return fresh();
  std::lock_guard lock(mu_);
  std::shared_ptr<SharedProposer>& slot = shared_[id];
  if (!slot) slot = fresh();
  return slot;
}

}  // namespace baton
