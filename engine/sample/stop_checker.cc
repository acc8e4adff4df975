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
  if (!params_.stop.empty()) {
    if (n > min_tokens) {
      // A new occurrence ends past searched_len_, so it starts at or after searched_len_ + 1 - size.
      const std::string* found = nullptr;
      std::size_t found_at = std::string::npos;
      for (const std::string& stop : params_.stop) {
        if (stop.empty()) continue;  // rejected by validate()
        const std::size_t from = searched_len_ + 1 > stop.size() ? searched_len_ + 1 - stop.size() : 0;
        if (from < text.size()) searched_bytes_ += text.size() - from;
        const std::size_t at = text.find(stop, from);
        if (at < found_at) {
          found_at = at;
          found = &stop;
        }
      }
      if (found != nullptr) {
        decision.reason = FinishReason::kStop;
        decision.stop_string = *found;
        decision.visible_len = found_at + (params_.include_stop_str_in_output ? found->size() : 0);
        searched_len_ = decision.visible_len;
        return decision;
      }
    }
    searched_len_ = text.size();
  }

  if (at_length) {
    decision.reason = FinishReason::kLength;
    decision.visible_len = text.size();
    return decision;
  }
  decision.visible_len = text.size() - held_back_length(text);
  return decision;
}

std::size_t StopChecker::held_back_length(std::string_view text) const {
  if (params_.include_stop_str_in_output) return 0;
  std::size_t held = 0;
  for (const std::string& stop : params_.stop) {
    if (stop.empty()) continue;
    for (std::size_t len = std::min(stop.size() - 1, text.size()); len > held; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        held = len;
        break;
      }
    }
  }
  return held;
}

}  // namespace baton
