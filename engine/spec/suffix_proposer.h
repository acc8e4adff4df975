// SuffixProposer: suffix decoding (SuffixDecoding, arXiv 2411.04975; REFERENCE.md §4). Each
// running request has a local SuffixTree over its prompt + output, extended as accepted tokens
// arrive; one global SuffixTree holds the outputs of the last `max_cached_requests` requests that
// finished normally (FIFO: the oldest output is taken out when one more would not fit; 0 = no
// global tree). A proposal is the best SuffixTree::speculate() of the two trees for the request's
// context (the local one on equal scores), at most min(max_spec_tokens, max_drafts) tokens,
// variable length, one-hot (no draft probabilities).
//
// Memory: a local tree is O(context) (at most about 2 nodes of 64 bytes per token, see
// suffix_tree.h) and goes with the request; the global tree is O(sum of the cached outputs).
// Time per propose() and request (D = max_tree_depth): O(D) per new token to extend the local
// tree, O(D·k) to speculate from it (its tail suffixes are already located), O(D² + D·k) to
// speculate from the global tree. add_request is O(prompt · D); a finished request costs
// O(output · D) to insert and, once the cache is full, as much again to evict the oldest.
//
// Contract: add_request before the first propose() for a key; the sequence only grows between
// calls. The global tree learns a finished request's output as far as propose() has seen it:
// tokens accepted after its last propose() call are not in it (the interface gives none at
// remove_request), so the engine should keep calling propose() — with max_drafts 0 if it wants
// no drafts — for every step it runs a request. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "engine/spec/proposer.h"
#include "engine/spec/suffix_tree.h"

namespace baton {

// The suffix keys of SpeculativeConfig, with vLLM's defaults.
struct SuffixProposerConfig {
  std::int32_t max_spec_tokens = 24;         // num_speculative_tokens (k): most drafts per step
  std::int32_t max_tree_depth = 24;          // suffix_decoding_max_tree_depth
  std::int32_t max_cached_requests = 10000;  // suffix_decoding_max_cached_requests
  float max_spec_factor = 1.0f;              // suffix_decoding_max_spec_factor
  float min_token_prob = 0.1f;               // suffix_decoding_min_token_prob
};

class SuffixProposer final : public Proposer {
 public:
  // Validated by SpeculativeConfig; impossible values (depth < 1, k < 0, negative
  // cache size or factor) abort.
  explicit SuffixProposer(const SuffixProposerConfig& config);
  ~SuffixProposer() override;

  std::string_view name() const override { return "suffix"; }

  // Re-adding a key that is still present replaces its state (nothing goes to the global tree).
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  // finished: the output seen so far (tokens past the latest prompt_len) joins the global tree.
  // Unknown keys are ignored.
  void remove_request(RequestKey key, bool finished) override;
  // Errors (FailedPrecondition) for a key never added or a sequence that does not extend the one
  // seen before; the other requests of the batch are still served.
  absl::Status propose(std::span<ProposalRequest> batch) override;

  // For tests and metrics.
  const SuffixTree* local_tree(RequestKey key) const;  // nullptr for unknown keys
  const SuffixTree& global_tree() const { return global_; }
  std::int32_t num_cached_requests() const { return static_cast<std::int32_t>(cached_.size()); }

 private:
  struct RequestState;

  SuffixProposerConfig config_;
  absl::flat_hash_map<RequestKey, std::unique_ptr<RequestState>> requests_;
  SuffixTree global_;
  std::deque<SuffixSeqId> cached_;  // global tree sequences, oldest first
};

}  // namespace baton
