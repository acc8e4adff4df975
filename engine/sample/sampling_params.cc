#include "engine/sample/sampling_params.h"

#include <cmath>

#include "common/status.h"

namespace baton {
namespace {

// Comparisons are written so that NaN fails them: `!(x >= lo)` is true for NaN.
absl::Status out_of_range(const char* field, const auto& value, const char* allowed) {
  return absl::InvalidArgumentError(str_cat(field, " must be ", allowed, ", got ", value));
}

}  // namespace

absl::Status SamplingParams::validate(std::int32_t vocab_size) const {
  if (!(temperature >= 0.0f) || std::isinf(temperature)) {
    return out_of_range("temperature", temperature, "a finite number >= 0 (0: greedy)");
  }
  if (top_k < -1) return out_of_range("top_k", top_k, "-1 or 0 (off) or >= 1");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return out_of_range("top_p", top_p, "in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return out_of_range("min_p", min_p, "in [0, 1]");
  if (!(repetition_penalty > 0.0f) || std::isinf(repetition_penalty)) {
    return out_of_range("repetition_penalty", repetition_penalty, "a finite number > 0 (1: off)");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return out_of_range("presence_penalty", presence_penalty, "in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return out_of_range("frequency_penalty", frequency_penalty, "in [-2, 2]");
  }
  if (max_tokens < 1) return out_of_range("max_tokens", max_tokens, ">= 1");
  if (max_speculative_tokens && *max_speculative_tokens < 0) {
    return out_of_range("max_speculative_tokens", *max_speculative_tokens, ">= 0 (0: no speculation)");
  }
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return out_of_range("min_tokens", min_tokens, str_cat("in [0, max_tokens = ", max_tokens, "]").c_str());
  }
  if (stop_token_ids.size() > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(
        str_cat("stop_token_ids has ", stop_token_ids.size(), " ids; at most ", kMaxStopTokenIds));
  }
  if (stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(str_cat("stop has ", stop.size(), " strings; at most ", kMaxStopStrings));
  }
  for (std::size_t i = 0; i < stop_token_ids.size(); ++i) {
    const std::int32_t id = stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          str_cat("stop_token_ids[", i, "] must be a token id in [0, ", vocab_size, "), got ", id));
    }
  }
  for (std::size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return absl::InvalidArgumentError(str_cat("stop[", i, "] must be a non-empty string"));
    if (stop[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(
          str_cat("stop[", i, "] has ", stop[i].size(), " bytes; at most ", kMaxStopStringBytes));
    }
  }
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    return out_of_range("logprobs", logprobs,
                        str_cat("-1 (none) or in [0, ", kMaxLogprobs, "] (at most ", kMaxLogprobs,
                                " top logprobs are returned)")
                            .c_str());
  }
  return absl::OkStatus();
}

}  // namespace baton
