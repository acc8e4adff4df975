// Proposer: the interface every speculative proposer implements (n-gram, suffix, draft model,
// EAGLE-1/3, MTP). It keeps per-request state — created by add_request, extended as accepted
// tokens arrive (each propose() call sees the request's whole token sequence, which only grows
// between calls: rejected drafts never enter it), and dropped by remove_request — and proposes for
// a batch of running requests at once, a variable number of drafts per request.
//
// Proposers must not change anything the target model or its KV cache owns; model-based ones keep
// their own KV and consume the target's hidden states through ModelProposer (model_proposer.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/sample/sampler.h"
#include "engine/sample/sampling_params.h"

namespace baton {

using RequestKey = std::uint64_t;

struct ProposalRequest {
  RequestKey key = 0;
  std::span<const std::int32_t> tokens;  // prompt + output so far; the last one is the newest token
  std::int32_t prompt_len = 0;
  std::int32_t max_drafts = 0;            // at most k, less near max_tokens / max_model_len
  std::vector<std::int32_t>* drafts = nullptr;  // out: 0..max_drafts proposed tokens
  // out, only for probabilistic drafts: drafts->size() rows of vocab probabilities q (row i is the
  // distribution drafts[i] was sampled from). Empty for one-hot (deterministic) drafts.
  std::vector<float>* draft_probs = nullptr;
  // The request's sampling parameters and random stream, for proposers that sample their drafts
  // (draft_sample_method = probabilistic); deterministic proposers ignore them.
  const SamplingParams* sampling = nullptr;
  RequestRng* rng = nullptr;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;
  // True when drafts come with their probabilities q (probabilistic draft sampling).
  virtual bool has_draft_probs() const { return false; }

  virtual void add_request(RequestKey key, std::span<const std::int32_t> prompt) = 0;
  // `finished`: the request completed normally, so its output may teach a global cache (suffix
  // decoding); false for aborts and preemptions.
  virtual void remove_request(RequestKey key, bool finished) = 0;
  virtual absl::Status propose(std::span<ProposalRequest> batch) = 0;
};

}  // namespace baton
