#include "engine/spec/suffix_proposer.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

struct SuffixProposer::RequestState {
  explicit RequestState(std::int32_t max_depth) : tree(max_depth), seq(tree.add_sequence()) {}
  SuffixTree tree;  // holds one sequence: the request's prompt + output seen so far
  SuffixSeqId seq;
  std::int32_t prompt_len = 0;  // where the output starts (the latest prompt_len given)
};

SuffixProposer::SuffixProposer(const SuffixProposerConfig& config)
    : config_(config), global_(config.max_tree_depth) {
  BATON_CHECK(config.max_spec_tokens >= 0 && config.max_cached_requests >= 0 &&
                  config.max_spec_factor >= 0.0f,
              "SuffixProposer: max_spec_tokens ", config.max_spec_tokens,
              ", max_cached_requests ", config.max_cached_requests, ", max_spec_factor ",
              config.max_spec_factor, " must all be >= 0");
}

SuffixProposer::~SuffixProposer() = default;

void SuffixProposer::add_request(RequestKey key, std::span<const std::int32_t> prompt) {
  auto state = std::make_unique<RequestState>(config_.max_tree_depth);
  state->tree.extend(state->seq, prompt);
  state->prompt_len = static_cast<std::int32_t>(prompt.size());
  requests_[key] = std::move(state);
}

void SuffixProposer::remove_request(RequestKey key, bool finished) {
  const auto found = requests_.find(key);
  if (found == requests_.end()) return;
  const RequestState& state = *found->second;
  const std::span<const std::int32_t> seq = state.tree.sequence(state.seq);
  const auto output_start = std::min(seq.size(), static_cast<std::size_t>(state.prompt_len));
  if (finished && config_.max_cached_requests > 0 && output_start < seq.size()) {
    // Oldest out first, then the newest in: the tree never holds more than the limit.
    while (static_cast<std::int32_t>(cached_.size()) >= config_.max_cached_requests) {
      global_.remove_sequence(cached_.front());
      cached_.pop_front();
    }
    const SuffixSeqId id = global_.add_sequence();
    global_.extend(id, seq.subspan(output_start));
    cached_.push_back(id);
  }
  requests_.erase(found);
}

absl::Status SuffixProposer::propose(std::span<ProposalRequest> batch) {
  absl::Status status;
  for (ProposalRequest& req : batch) {
    BATON_CHECK(req.drafts != nullptr, "suffix propose: request ", req.key, " has no drafts vector");
    req.drafts->clear();
    if (req.draft_probs != nullptr) req.draft_probs->clear();
    const auto found = requests_.find(req.key);
    if (found == requests_.end()) {
      status.Update(absl::FailedPreconditionError(
          str_cat("suffix proposer: request ", req.key, " was never added (call add_request first)")));
      continue;
    }
    RequestState& state = *found->second;
    const std::span<const std::int32_t> seen = state.tree.sequence(state.seq);
    if (req.tokens.size() < seen.size() || (!seen.empty() && req.tokens[seen.size() - 1] != seen.back())) {
      status.Update(absl::FailedPreconditionError(str_cat(
          "suffix proposer: request ", req.key, " has ", req.tokens.size(),
          " tokens, which do not extend the ", seen.size(),
          " seen before (the sequence may only grow; re-add the request after a reset)")));
      continue;
    }
    state.tree.extend(state.seq, req.tokens.subspan(seen.size()));
    if (req.prompt_len >= 0) state.prompt_len = req.prompt_len;

    const std::int32_t max_tokens = std::min(config_.max_spec_tokens, req.max_drafts);
    if (max_tokens <= 0) continue;
    SuffixSpeculation best = state.tree.speculate_tail(state.seq, max_tokens, config_.max_spec_factor,
                                                       config_.min_token_prob);
    if (global_.num_sequences() > 0) {
      SuffixSpeculation global = global_.speculate(req.tokens, max_tokens, config_.max_spec_factor,
                                                   config_.min_token_prob);
      if (global.score > best.score) best = std::move(global);  // the local tree wins ties
    }
    req.drafts->assign(best.tokens.begin(), best.tokens.end());
  }
  return status;
}

const SuffixTree* SuffixProposer::local_tree(RequestKey key) const {
  const auto found = requests_.find(key);
  return found == requests_.end() ? nullptr : &found->second->tree;
}

}  // namespace baton
