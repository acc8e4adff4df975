// Speculator: speculative decoding inside one engine step, around the proposer.
//
// After the target forward it verifies each request's drafts (rejection sampling or block
// verification over the target's processed distributions, with the request's keyed random
// numbers), returns the tokens to append, counts acceptance (vLLM's counters), hands the target's
// hidden states to proposers that need them, and asks the proposer for the next step's drafts. It
// also relays the proposer's part of a prefill/decode hand-off. A failure that concerns one request
// is returned for that request alone. It never touches the KV cache or the scheduler: the engine
// appends tokens and rolls back blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/request.h"
#include "engine/spec/config.h"
#include "engine/spec/draft_length.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/proposer.h"
#include "engine/spec/rejection_sampler.h"

namespace baton {

// vLLM's speculative-decoding counters (docs/metrics.md).
struct SpecDecodeStats {
  std::int64_t num_drafts = 0;           // one per request per step that verified >= 1 draft
  std::int64_t num_draft_tokens = 0;
  std::int64_t num_accepted_tokens = 0;
  std::vector<std::int64_t> accepted_per_position;  // [k]
  // Proposals by the draft length they asked for, [k + 1]: all at k unless disable_by_batch_size
  // or adaptive_draft_length lowered it for the step.
  std::vector<std::int64_t> proposals_by_length;

  double acceptance_rate() const {
    return num_draft_tokens > 0 ? static_cast<double>(num_accepted_tokens) / static_cast<double>(num_draft_tokens) : 0.0;
  }
  // Tokens per verification step, counting the bonus/correction token.
  double mean_acceptance_length() const {
    return num_drafts > 0 ? 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts) : 0.0;
  }
};

struct VerifiedTokens {
  std::vector<std::int32_t> tokens;   // accepted drafts, then the correction or bonus token
  std::vector<SampleResult> logprobs;  // per token, when the request asked for logprobs
  std::int32_t num_accepted = 0;
};

// A request the proposer failed for, and why.
using ProposalFailure = std::pair<Request*, absl::Status>;

class Speculator {
 public:
  // `config` has num_speculative_tokens resolved (>= 1). `broken_for_testing` swaps in the
  // deliberately lossy verify_broken_for_testing (negative control of `baton verify-lossless`).
  Speculator(const SpeculativeConfig& config, std::unique_ptr<Proposer> proposer, std::int32_t vocab_size,
             std::vector<std::int32_t> eos_token_ids, bool broken_for_testing = false);

  const SpeculativeConfig& config() const { return config_; }
  const SpecDecodeStats& stats() const { return stats_; }
  Proposer& proposer() { return *proposer_; }
  const Proposer& proposer() const { return *proposer_; }
  // Hidden states the proposer needs from every target forward (empty spec if none).
  TargetStateSpec target_states() const;
  // The proposer as a consumer of those states; nullptr when it needs none.
  TargetStateConsumer* state_consumer() { return state_consumer_; }

  void add_request(const Request& r);
  void remove_request(const Request& r, bool finished);
  // The target dropped r's KV (preemption): the proposer forgets what it computed from it.
  void reset_request(const Request& r);

  // Verifies r.drafts against logits rows [r.drafts.size() + 1, vocab] of the target forward.
  // DATA_LOSS when a row cannot be sampled (Sampler::try_sample): the request cannot go on.
  absl::StatusOr<VerifiedTokens> verify(Request& r, std::span<const float> logits);
  // The same from the token the target picks at each row, where the logits are
  // (Backend::argmax_rows / sample_rows): target_picks [r.drafts.size() + 1]. For a greedy request
  // the picks are the argmaxes; for a sampled one with one-hot drafts, row i's pick is the draw
  // token_stream(seed, position + i) makes from p_i, which is exactly what verify() matches the
  // drafts against (rejection_sampler.h). Not for logprobs, penalties or probabilistic drafts.
  VerifiedTokens verify_picks(Request& r, std::span<const std::int32_t> target_picks);
  // Whether verification is the deliberately lossy one (it must see the logits rows).
  bool broken_for_testing() const { return broken_for_testing_; }
  // Entropy verification is on: sampled requests' drafts need their probability rows on the host
  // (the device's matching picks would apply the lossless rule).
  bool verifies_lossy() const { return !config_.lossless(); }

  // Passes a chunk's captured states to the proposer (no-op for token-only proposers), and notes
  // in r a file the proposer completed for it (Proposer::output_file).
  absl::Status observe(Request& r, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                       std::int32_t n_valid);
  // Call before every target forward: the proposer keeps what it still needs of the last one's
  // states (TargetStateConsumer::before_target_forward).
  void before_target_forward() {
    if (state_consumer_ != nullptr) state_consumer_->before_target_forward();
  }

  // Fills r->drafts (and r->draft_probs) for every given decoding request, respecting max_tokens,
  // max_model_len and the request's own max_speculative_tokens; none at all when `decoding` (the
  // requests the step decodes) reaches the config's disable_by_batch_size, though the proposer
  // still sees every request (its state keeps up with the tokens). With adaptive_draft_length the
  // step's length (0..k) is the controller's choice. Returns the requests the proposer failed for
  // (they got no drafts); if the batch as a whole fails, each request is retried alone so the
  // failure is pinned on its owner.
  std::vector<ProposalFailure> propose(std::span<Request* const> requests, std::int32_t max_model_len,
                                       std::size_t decoding);

  // Whether the engine should report step times (adaptive_draft_length is on).
  bool wants_step_times() const { return draft_length_ != nullptr; }
  // The clock step times are read from (EngineHooks::step_clock; default the steady clock).
  void set_step_clock(std::function<std::chrono::steady_clock::time_point()> clock) { step_clock_ = std::move(clock); }
  std::chrono::steady_clock::time_point step_now() const {
    return step_clock_ ? step_clock_() : std::chrono::steady_clock::now();
  }
  // A step whose chunks were all `requests` decoding requests (their drafts, if any, from the last
  // propose()) took `seconds` from the forward to the last verification.
  void record_verify_seconds(std::size_t requests, double seconds);
  const DraftLengthController* draft_length() const { return draft_length_.get(); }

 private:
  // Builds the proposal for r into batch_[i] / streams_[i], drafting at most `length` tokens.
  void prepare(Request* r, std::int32_t max_model_len, std::size_t i, std::int32_t length);
  // The tokens a verification emits, its logprobs (from `logits`, when asked for) and its counts;
  // clears r's drafts.
  VerifiedTokens accept(Request& r, const VerifyResult& res, std::span<const float> logits);
  // Checks what the proposer returned for batch_[i]; the failure, if any.
  absl::Status check(const ProposalRequest& p) const;

  SpeculativeConfig config_;
  std::unique_ptr<Proposer> proposer_;
  TargetStateConsumer* state_consumer_ = nullptr;  // proposer_, when it consumes target states
  std::int32_t vocab_;
  std::vector<std::int32_t> eos_;
  bool broken_for_testing_ = false;
  SpecDecodeStats stats_;
  Sampler sampler_;
  std::vector<float> probs_;                 // [(k + 1) * vocab] scratch
  std::vector<std::int32_t> history_;        // output + drafts scratch
  std::vector<ProposalRequest> batch_;
  std::vector<RandomStream> streams_;        // batch_[i].draft_rng points at streams_[i]
  std::unique_ptr<DraftLengthController> draft_length_;  // adaptive_draft_length only
  std::int32_t last_length_ = 0;             // the draft length of the last propose()
  std::function<std::chrono::steady_clock::time_point()> step_clock_;  // empty: the steady clock
  std::vector<RequestKey> keys_;             // scratch
};

}  // namespace baton
