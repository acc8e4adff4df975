// NgramProposer: prompt-lookup decoding (vLLM's `ngram` method). Drafts are the tokens that followed the
// earliest earlier occurrence of the longest suffix of the context (prompt + output) whose length
// n lies in [min_n, max_n]. One-hot drafts, no model, no draft probabilities.
//
// The rule, exactly (same result as vLLM's KMP scan over the reversed context):
//   L = context length. An occurrence of the length-n suffix is a start s with s + n <= L - 1 (it
//   ends before the last position) and context[s, s+n) == context[L-n, L). Take the largest n in
//   [min_n, min(max_n, L-1)] that has one; among its occurrences take the smallest s; propose
//   context[s+n, min(s+n+d, L)) with d = min(k, max_drafts) — at least one token, fewer than d at
//   the end of the context. No occurrence for any n >= min_n (or L - 1 < min_n): no drafts.
//
// Per request it keeps a copy of the context and, for every n in [min_n, max_n], a hash set of
// the earliest start of each distinct n-gram seen so far (keyed by content, so exact: no hash
// collision can produce a wrong match). New tokens are indexed as they arrive, so a propose() call
// costs O((max_n - min_n + 1) · max_n) per request plus O(n_new · (max_n - min_n + 1) · max_n) for
// the tokens that arrived since the last call, independent of the context length. Memory per
// request: about 4 + 10 · (max_n - min_n + 1) bytes per context token. add_request indexes the
// prompt in O(prompt · (max_n - min_n + 1) · max_n).
//
// Contract: the engine calls add_request before the first propose() for a key and remove_request
// when the request leaves; the sequence given to propose() only grows between calls (rejected
// drafts never enter it). Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "engine/spec/proposer.h"

namespace baton {

class NgramProposer final : public Proposer {
 public:
  // 1 <= min_n <= max_n, k >= 0 (validated by SpeculativeConfig; violations abort).
  NgramProposer(std::int32_t min_n, std::int32_t max_n, std::int32_t k);
  ~NgramProposer() override;

  std::string_view name() const override { return "ngram"; }

  // Re-adding a key that is still present replaces its state.
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void remove_request(RequestKey key, bool finished) override;  // unknown keys are ignored
  // Errors (FailedPrecondition) for a key never added or a sequence shorter than the last one
  // seen; the other requests of the batch are still served.
  absl::Status propose(std::span<ProposalRequest> batch) override;

  std::int32_t num_requests() const { return static_cast<std::int32_t>(requests_.size()); }

 private:
  class RequestIndex;

  std::int32_t min_n_;
  std::int32_t max_n_;
  std::int32_t k_;
  absl::flat_hash_map<RequestKey, std::unique_ptr<RequestIndex>> requests_;
};

}  // namespace baton
