#include "engine/spec/speculator.h"

#include <algorithm>
#include <chrono>

#include "common/status.h"
#include "engine/spec/broken_rejection_sampler.h"
#include "engine/spec/rejection_sampler.h"

namespace baton {

Speculator::Speculator(const SpeculativeConfig& config, std::unique_ptr<Proposer> proposer, std::int32_t vocab_size,
                       std::vector<std::int32_t> eos_token_ids, bool broken_for_testing)
    : config_(config),
      proposer_(std::move(proposer)),
      vocab_(vocab_size),
      eos_(std::move(eos_token_ids)),
      broken_for_testing_(broken_for_testing) {
  BATON_CHECK(config_.num_speculative_tokens >= 1, "speculator needs a resolved num_speculative_tokens, got ",
              config_.num_speculative_tokens);
  state_consumer_ = dynamic_cast<TargetStateConsumer*>(proposer_.get());
  stats_.accepted_per_position.assign(static_cast<std::size_t>(config_.num_speculative_tokens), 0);
  stats_.proposals_by_length.assign(static_cast<std::size_t>(config_.num_speculative_tokens) + 1, 0);
  if (config_.adaptive_draft_length) {
    draft_length_ = std::make_unique<DraftLengthController>(config_.num_speculative_tokens);
  }
}

TargetStateSpec Speculator::target_states() const {
  return state_consumer_ != nullptr ? state_consumer_->target_states() : TargetStateSpec{};
}

void Speculator::add_request(const Request& r) {
  proposer_->add_request(r.key, r.prompt());
  proposer_->label_request(r.key, r.id);
}

void Speculator::remove_request(const Request& r, bool finished) {
  if (finished) {
    // Let the proposer see the final tokens first (suffix decoding learns whole outputs).
    std::vector<std::int32_t> none;
    ProposalRequest p;
    p.key = r.key;
    p.tokens = r.tokens;
    p.prompt_len = r.prompt_len;
    p.max_drafts = 0;
    p.drafts = &none;
    (void)proposer_->propose(std::span<ProposalRequest>(&p, 1));
  }
  proposer_->remove_request(r.key, finished);
  if (draft_length_) draft_length_->forget(r.key);
}

void Speculator::reset_request(const Request& r) { proposer_->reset_request(r.key); }

void Speculator::record_verify_seconds(std::size_t requests, double seconds) {
  if (draft_length_) draft_length_->record_verify_seconds(requests, last_length_, seconds);
}

absl::Status Speculator::observe(Request& r, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                                 std::int32_t n_valid) {
  if (state_consumer_ == nullptr) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(state_consumer_->observe(r.key, start, rows, n, n_valid));
  if (r.hidden_states_path.empty()) r.hidden_states_path = proposer_->output_file(r.key);
  return absl::OkStatus();
}

absl::StatusOr<VerifiedTokens> Speculator::verify(Request& r, std::span<const float> logits) {
  const auto k = static_cast<std::int32_t>(r.drafts.size());
  const auto v = static_cast<std::size_t>(vocab_);
  BATON_CHECK(logits.size() == static_cast<std::size_t>(k + 1) * v, "verify: ", logits.size(), " logits for ", k,
              " drafts");
  // Row i is processed with the output so far plus drafts[0..i) as history (penalties see them),
  // and a response format's mask after them.
  const auto output = r.output();
  history_.assign(output.begin(), output.end());
  history_.insert(history_.end(), r.drafts.begin(), r.drafts.end());
  const std::vector<std::vector<std::uint8_t>>* masks = r.constraint ? &r.constraint->masks_along(r.drafts) : nullptr;
  auto history_for_row = [&](std::int32_t i) {
    return TokenHistory{r.prompt(),
                        std::span<const std::int32_t>(history_).first(output.size() + static_cast<std::size_t>(i)),
                        masks != nullptr ? std::span<const std::uint8_t>((*masks)[static_cast<std::size_t>(i)])
                                         : std::span<const std::uint8_t>()};
  };
  VerifyResult res;
  if (r.params.greedy() && !broken_for_testing_) {
    // Greedy (either method): drafts are accepted while each equals its row's greedy token, and the
    // first other row's token (or the bonus row's) comes next: verify_greedy's rule on the one-hot
    // rows target_probs() would write, read straight from the logits, and no row after the first
    // mismatch is looked at.
    res.num_accepted = k;
    for (std::int32_t i = 0; i <= k; ++i) {
      BATON_ASSIGN_OR_RETURN(const std::int32_t best,
                             sampler_.try_greedy_token(logits.subspan(static_cast<std::size_t>(i) * v, v), r.params,
                                                       history_for_row(i), eos_));
      if (i == k || best != r.drafts[static_cast<std::size_t>(i)]) {
        res.num_accepted = i;
        res.next_token = best;
        break;
      }
    }
  } else {
    probs_.resize(static_cast<std::size_t>(k + 1) * v);
    for (std::int32_t i = 0; i <= k; ++i) {
      BATON_RETURN_IF_ERROR(sampler_.try_target_probs(logits.subspan(static_cast<std::size_t>(i) * v, v), r.params,
                                                      history_for_row(i), eos_,
                                                      std::span<float>(probs_).subspan(static_cast<std::size_t>(i) * v, v)));
    }
    VerifyInput in;
    in.vocab_size = vocab_;
    in.drafts = r.drafts;
    in.target_probs = probs_;
    in.draft_probs = r.draft_probs;
    in.greedy = r.params.greedy();
    in.entropy = &config_.entropy_verification;
    if (!in.greedy && k > 0 && !config_.lossless()) r.spec.lossy = true;
    // The first token this step decides sits right after the pending (newest) token.
    const VerifyRandomness random{r.seed, r.num_tokens()};
    res = broken_for_testing_                                          ? verify_broken_for_testing(in, random)
          : config_.rejection_sample_method == RejectionMethod::kBlock ? verify_block(in, random)
                                                                       : verify_standard(in, random);
  }
  return accept(r, res, logits);
}

VerifiedTokens Speculator::verify_picks(Request& r, std::span<const std::int32_t> target_picks) {
  const auto k = static_cast<std::int32_t>(r.drafts.size());
  BATON_CHECK(target_picks.size() == static_cast<std::size_t>(k) + 1, "verify_picks: ", target_picks.size(),
              " picks for ", k, " drafts");
  BATON_CHECK(r.params.logprobs < 0 && !broken_for_testing_ && r.draft_probs.empty() &&
                  !Sampler::needs_row_processing(r.params, static_cast<std::size_t>(r.num_output())),
              "verify_picks on a request whose rows the host must process");
  // The matching rule of verify() (greedy, and sampled with one-hot drafts, standard or block):
  // accept while each draft is its row's pick; the first other pick (or the bonus row's) comes next.
  VerifyResult res{k, target_picks[static_cast<std::size_t>(k)]};
  for (std::int32_t i = 0; i < k; ++i) {
    if (target_picks[static_cast<std::size_t>(i)] != r.drafts[static_cast<std::size_t>(i)]) {
      res = VerifyResult{i, target_picks[static_cast<std::size_t>(i)]};
      break;
    }
  }
  return accept(r, res, {});
}

VerifiedTokens Speculator::accept(Request& r, const VerifyResult& res, std::span<const float> logits) {
  const auto k = static_cast<std::int32_t>(r.drafts.size());
  const auto v = static_cast<std::size_t>(vocab_);
  VerifiedTokens out;
  out.num_accepted = res.num_accepted;
  out.tokens.assign(r.drafts.begin(), r.drafts.begin() + res.num_accepted);
  out.tokens.push_back(res.next_token);
  if (r.params.logprobs >= 0) {
    BATON_CHECK(!logits.empty(), "logprobs without the logits rows");
    for (std::size_t i = 0; i < out.tokens.size(); ++i) {
      out.logprobs.push_back(Sampler::raw_logprobs(logits.subspan(i * v, v), out.tokens[i], r.params.logprobs));
    }
  }
  if (k > 0) {
    ++stats_.num_drafts;
    stats_.num_draft_tokens += k;
    stats_.num_accepted_tokens += res.num_accepted;
    ++r.spec.num_drafts;
    r.spec.num_draft_tokens += k;
    r.spec.num_accepted_tokens += res.num_accepted;
    r.spec.accepted_per_position.resize(stats_.accepted_per_position.size());
    for (std::int32_t i = 0; i < res.num_accepted && i < static_cast<std::int32_t>(stats_.accepted_per_position.size()); ++i) {
      ++stats_.accepted_per_position[static_cast<std::size_t>(i)];
      ++r.spec.accepted_per_position[static_cast<std::size_t>(i)];
    }
    if (draft_length_) draft_length_->record_verification(r.key, k, res.num_accepted);
  }
  r.drafts.clear();
  r.draft_probs.clear();
  return out;
}

void Speculator::prepare(Request* r, std::int32_t max_model_len, std::size_t i, std::int32_t length) {
  r->drafts.clear();
  r->draft_probs.clear();
  // Each step emits at most drafts + 1 tokens; never plan past max_tokens or max_model_len. Both
  // depend on the request alone, so its draft count does too.
  const std::int32_t room = std::min(r->params.max_tokens - r->num_output() - 1, max_model_len - r->num_tokens() - 1);
  // Requests with no room still go to the proposer (max_drafts 0), which keeps token-indexed
  // state such as suffix trees in step with the output.
  // A request may lower k for itself (0: plain decoding); the output does not depend on it.
  // So may the step (`length`: disable_by_batch_size, adaptive_draft_length).
  const std::int32_t k = std::min(length, r->params.max_speculative_tokens.value_or(length));
  const std::int32_t max_drafts = std::max(0, std::min(k, room));
  r->spec.proposals_by_length.resize(stats_.proposals_by_length.size());
  ++r->spec.proposals_by_length[static_cast<std::size_t>(std::clamp(k, 0, static_cast<std::int32_t>(stats_.proposals_by_length.size()) - 1))];
  // Drafts are sampled from the stream of the step that verifies them (random.h).
  streams_[i] = RandomStream(r->seed, RandomPurpose::kDraft, r->num_tokens());
  ProposalRequest& p = batch_[i];
  p = ProposalRequest{};
  p.key = r->key;
  p.tokens = r->tokens;
  p.prompt_len = r->prompt_len;
  p.max_drafts = max_drafts;
  p.drafts = &r->drafts;
  p.draft_probs = proposer_->has_draft_probs() ? &r->draft_probs : nullptr;
  p.sampling = &r->params;
  p.draft_rng = &streams_[i];
}

absl::Status Speculator::check(const ProposalRequest& p) const {
  if (!p.status.ok()) return p.status;
  if (static_cast<std::int32_t>(p.drafts->size()) > p.max_drafts) {
    return absl::InternalError(str_cat("proposer ", proposer_->name(), " returned ", p.drafts->size(),
                                       " drafts where at most ", p.max_drafts, " were allowed"));
  }
  for (std::int32_t t : *p.drafts) {
    if (t < 0 || t >= vocab_) {
      return absl::InternalError(str_cat("proposer ", proposer_->name(), " proposed token ", t, " outside the vocabulary"));
    }
  }
  if (p.draft_probs != nullptr && p.draft_probs->size() != p.drafts->size() * static_cast<std::size_t>(vocab_)) {
    return absl::InternalError(str_cat("proposer ", proposer_->name(), " returned ", p.draft_probs->size(),
                                       " draft probabilities for ", p.drafts->size(), " drafts"));
  }
  return absl::OkStatus();
}

std::vector<ProposalFailure> Speculator::propose(std::span<Request* const> requests, std::int32_t max_model_len,
                                                 std::size_t decoding) {
  std::vector<ProposalFailure> failures;
  if (requests.empty()) return failures;
  const bool drafts_off =
      config_.disable_by_batch_size > 0 && decoding >= static_cast<std::size_t>(config_.disable_by_batch_size);
  std::int32_t length = drafts_off ? 0 : config_.num_speculative_tokens;
  if (draft_length_ && !drafts_off) {
    keys_.clear();
    for (const Request* r : requests) keys_.push_back(r->key);
    length = draft_length_->choose(keys_);
  }
  // After a step without drafts, a model-based proposer first catches up on every token it skipped:
  // that proposal's time is the price of the pause, not of drafting `length`, and is not counted.
  const bool steady = last_length_ > 0;
  last_length_ = length;
  ++stats_.proposals_by_length[static_cast<std::size_t>(length)];
  batch_.resize(requests.size());
  streams_.assign(requests.size(), RandomStream(0, RandomPurpose::kDraft, 0));
  for (std::size_t i = 0; i < requests.size(); ++i) prepare(requests[i], max_model_len, i, length);
  const auto t0 = step_now();
  const absl::Status whole = proposer_->propose(batch_);
  if (whole.ok()) {
    if (draft_length_ && !drafts_off && (steady || length == 0)) {
      draft_length_->record_draft_seconds(requests.size(), length,
                                          std::chrono::duration<double>(step_now() - t0).count());
    }
    for (std::size_t i = 0; i < requests.size(); ++i) {
      absl::Status s = check(batch_[i]);
      if (!s.ok()) {
        failures.emplace_back(requests[i], s);
      } else if (draft_length_) {
        draft_length_->record_proposal(batch_[i].key, batch_[i].max_drafts, static_cast<std::int32_t>(batch_[i].drafts->size()));
      }
    }
  } else {
    // Retry one by one: whoever still fails alone is the one at fault.
    for (std::size_t i = 0; i < requests.size(); ++i) {
      prepare(requests[i], max_model_len, i, length);
      absl::Status s = proposer_->propose(std::span<ProposalRequest>(&batch_[i], 1));
      if (s.ok()) s = check(batch_[i]);
      if (!s.ok()) failures.emplace_back(requests[i], s);
    }
  }
  for (const ProposalFailure& f : failures) {
    f.first->drafts.clear();
    f.first->draft_probs.clear();
  }
  return failures;
}

}  // namespace baton
