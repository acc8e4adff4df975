#include "engine/spec/suffix_proposer.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

struct SuffixProposer::RequestState {
  explicit RequestState(std::int32_t max_depth) : tree(max_depth), seq(tree.add_sequence()) {}
  SuffixTree tree;  // holds one sequence: the request's prompt + output seen so far
  SuffixSeqId seq;
  std::int32_t prompt_len = 0;  // where the output starts (the latest prompt_len given)
  // The request's response in the global tree, while it is cached (cached_.end() when evicted or
  // when there is no global tree); it holds tokens [prompt_len, fed_to) of the sequence.
  std::list<CachedResponse>::iterator response;
  std::size_t fed_to = 0;
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

void SuffixProposer::evict(std::list<CachedResponse>::iterator response) {
  if (response->running) requests_.at(response->key)->response = cached_.end();
  global_.remove_sequence(response->seq);
  cached_.erase(response);
}

void SuffixProposer::drop(RequestKey key, bool keep_response) {
  const auto found = requests_.find(key);
  if (found == requests_.end()) return;
  const auto response = found->second->response;
  if (response != cached_.end()) {
    if (keep_response && !global_.sequence(response->seq).empty()) {
      response->running = false;
    } else {
      evict(response);
    }
  }
  requests_.erase(found);
}

void SuffixProposer::add_request(RequestKey key, std::span<const std::int32_t> prompt) {
  drop(key, /*keep_response=*/false);  // a reset: its output will be fed again from the start
  auto state = std::make_unique<RequestState>(config_.max_tree_depth);
  state->tree.extend(state->seq, prompt);
  state->prompt_len = static_cast<std::int32_t>(prompt.size());
  state->response = cached_.end();
  if (config_.max_cached_requests > 0) {
    // Oldest out first, running or not, then the new response in: never more than the limit.
    while (static_cast<std::int32_t>(cached_.size()) >= config_.max_cached_requests) evict(cached_.begin());
    state->response = cached_.insert(cached_.end(), CachedResponse{global_.add_sequence(), key, true});
  }
  requests_[key] = std::move(state);
}

void SuffixProposer::remove_request(RequestKey key, bool finished) {
  drop(key, /*keep_response=*/finished);
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
    if (state.response != cached_.end()) {
      // The response grows in the global tree as it is generated: every request can draft from
      // it from the next step on, this one included.
      const std::size_t from = std::max(state.fed_to, static_cast<std::size_t>(state.prompt_len));
      if (from < req.tokens.size()) global_.extend(state.response->seq, req.tokens.subspan(from));
      state.fed_to = std::max(state.fed_to, req.tokens.size());
    }

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
