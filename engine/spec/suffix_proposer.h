// SuffixProposer: suffix decoding (SuffixDecoding, arXiv 2411.04975). Each
// running request has a local SuffixTree over its prompt + output, extended as accepted tokens
// arrive; one global SuffixTree holds the responses (output tokens, never prompts) of the last
// `max_cached_requests` requests, running ones included, each growing as propose() sees it. A
// proposal is the best SuffixTree::speculate() of the two trees for the request's context (the
// local one on equal scores), at most min(max_spec_tokens, max_drafts) tokens, variable length,
// one-hot (no draft probabilities).
//
// Global cache semantics, as Arctic Inference's SuffixDecodingCache (which vLLM's suffix method
// calls) has them: add_request reserves the request's response a place at the back of a FIFO of
// cached responses, first evicting from the front until fewer than max_cached_requests remain —
// running responses count and may be evicted like finished ones (a running request whose
// response is evicted keeps proposing from both trees, but its later tokens teach only its local
// tree); every output token propose() sees joins the response before anything is drafted, so
// every later proposal can use it (this request's, and other requests' — later in the same batch
// too); a finished request leaves its response cached until it reaches the front. 0 = no global
// tree. Where we differ, and why:
// - remove_request(finished = false) — an abort, or a preemption that drops our state — takes the
//   response out at once (vLLM stops every request that leaves its batch alike, so an aborted
//   request's partial response stays cached until evicted). The Proposer contract reserves the
//   cache for normally finished requests; aborted outputs are often ones a client gave up on
//   (runaway or looping text, which would dominate the counts); a re-added request feeds its
//   whole output again, so keeping the old copy would count it twice.
// - A request removed with an empty response gives its place back instead of holding an empty
//   one until evicted, so the cap counts responses that can teach something.
// - Re-adding a key that is still present is a reset: its response goes, and the new state's
//   output is fed from its prompt_len on (Arctic refuses to start an active request; vLLM's
//   preempted-and-resumed requests get the same evict-then-start treatment).
// - No "unbounded" setting (Arctic's -1): the cap is what bounds the global tree's memory.
//
// Memory: a local tree is O(context) (at most about 2 nodes of 64 bytes plus 20 bytes per token,
// see suffix_tree.h) and goes with the request; the global tree is O(sum of the cached responses),
// at most max_cached_requests of them. Time per propose() and request (D = max_tree_depth): O(D)
// per new token for each tree it extends, O(D·k) to speculate from the local tree (its tail
// suffixes are already located), O(D² + D·k) from the global one. add_request is O(prompt · D)
// plus, once the cache is full, O(response · D) to evict the oldest response (as is an abort).
//
// Contract: add_request before the first propose() for a key; the sequence only grows between
// calls. The global tree learns a response as far as propose() has seen it: tokens accepted after
// its last propose() call are not in it (the interface gives none at remove_request), so the
// engine should keep calling propose() — with max_drafts 0 if it wants no drafts — for every step
// it runs a request. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <list>
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

  // Re-adding a key that is still present replaces its state, response included.
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  // finished: the response (tokens past the latest prompt_len, as far as propose() saw them) stays
  // in the global tree until evicted; otherwise it leaves now. Unknown keys are ignored.
  void remove_request(RequestKey key, bool finished) override;
  // Errors (FailedPrecondition) for a key never added or a sequence that does not extend the one
  // seen before; the other requests of the batch are still served.
  absl::Status propose(std::span<ProposalRequest> batch) override;

  // For tests and metrics.
  const SuffixTree* local_tree(RequestKey key) const;  // nullptr for unknown keys
  const SuffixTree& global_tree() const { return global_; }
  // Responses in the global tree, running and finished.
  std::int32_t num_cached_requests() const { return static_cast<std::int32_t>(cached_.size()); }

 private:
  struct RequestState;
  struct CachedResponse {
    SuffixSeqId seq;  // in global_
    RequestKey key;   // the request it came from
    bool running;     // the request is still in requests_ and feeds this response
  };

  void evict(std::list<CachedResponse>::iterator response);
  // Forgets a request's state; its response stays cached only if keep_response and non-empty.
  void drop(RequestKey key, bool keep_response);

  SuffixProposerConfig config_;
  absl::flat_hash_map<RequestKey, std::unique_ptr<RequestState>> requests_;
  SuffixTree global_;
  std::list<CachedResponse> cached_;  // oldest first; a list: aborts leave from the middle
};

}  // namespace baton
