#include "engine/sample/stop_checker.h"

#include <algorithm>

#include "common/status.h"

namespace baton {
namespace {

bool contains(std::span<const std::int32_t> ids, std::int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

StopChecker::StopChecker(const SamplingParams& params, std::span<const std::int32_t> eos_token_ids,
                         TextDecoder* decoder)
    : params_(params), eos_(eos_token_ids), decoder_(decoder) {
  BATON_CHECK(decoder_ != nullptr || params_.stop.empty(), params_.stop.size(),
              " stop strings but no TextDecoder: requests with stop strings must be rejected when there is "
              "no tokenizer");
  if (!params_.stop.empty()) automaton_ = std::make_unique<StopAutomaton>(params_.stop);
}

std::string_view StopChecker::text() const {
  return decoder_ != nullptr ? std::string_view(decoder_->text()) : std::string_view();
}

void StopChecker::feed(std::span<const std::int32_t> tokens) {
  if (tokens.size() <= fed_) return;
  decoder_->append(tokens.subspan(fed_));
  fed_ = tokens.size();
}

StopDecision StopChecker::check(std::span<const std::int32_t> output_tokens) {
  StopDecision decision;
  const std::size_t n = output_tokens.size();
  if (n == 0) return decision;
  BATON_CHECK(n >= fed_, "StopChecker::check with ", n, " output tokens after ", fed_,
              ": pass the whole output, which only grows");
  const auto min_tokens = static_cast<std::size_t>(std::max(params_.min_tokens, 0));

  const std::int32_t last = output_tokens.back();
  if (n >= min_tokens &&
      (contains(params_.stop_token_ids, last) || (!params_.ignore_eos && contains(eos_, last)))) {
    decision.reason = FinishReason::kStop;
    decision.stop_token = last;
    if (decoder_ != nullptr) {
      feed(params_.include_stop_str_in_output ? output_tokens : output_tokens.first(n - 1));
      decoder_->finish();
      decision.visible_len = decoder_->text().size();
    }
    return decision;
  }

  const bool at_length = n >= static_cast<std::size_t>(params_.max_tokens);
  if (decoder_ == nullptr) {
    if (at_length) decision.reason = FinishReason::kLength;
    return decision;
  }
  feed(output_tokens);
  if (at_length) decoder_->finish();
  const std::string_view text = decoder_->text();
  if (automaton_) {
    // Each new byte once; a match counts when it ends in this call's new text and the output is
    // past min_tokens (one that began before that boundary may straddle it). Earliest start wins,
    // then the first listed.
    const bool counts = n > min_tokens;
    std::size_t found_at = std::string::npos;
    std::int32_t found = -1;
    for (std::size_t pos = searched_len_; pos < text.size(); ++pos) {
      automaton_->feed(static_cast<unsigned char>(text[pos]));
      ++searched_bytes_;
      const std::int32_t m = counts ? automaton_->match() : -1;
      if (m < 0) continue;
      const std::size_t start = pos + 1 - automaton_->pattern_size(m);
      if (start < found_at || (start == found_at && m < found)) {
        found_at = start;
        found = m;
      }
    }
    searched_len_ = text.size();
    if (found >= 0) {
      const std::string& stop = params_.stop[static_cast<std::size_t>(found)];
      decision.reason = FinishReason::kStop;
      decision.stop_string = stop;
      decision.visible_len = found_at + (params_.include_stop_str_in_output ? stop.size() : 0);
      return decision;
    }
  }

  if (at_length) {
    decision.reason = FinishReason::kLength;
    decision.visible_len = text.size();
    return decision;
  }
  // The longest tail that is a proper prefix of a stop string is held back (nothing when the stop
  // string would be shown anyway).
  const std::size_t held = automaton_ && !params_.include_stop_str_in_output ? automaton_->held_back() : 0;
  decision.visible_len = text.size() - held;
  return decision;
}

}  // namespace baton
