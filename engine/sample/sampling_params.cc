#include "engine/sample/sampling_params.h"

#include "common/sampling_ranges.h"
#include "common/status.h"

namespace baton {

absl::Status SamplingParams::validate(std::int32_t vocab_size) const {
  SamplingValues v;
  v.temperature = temperature;
  v.top_k = top_k;
  v.top_p = top_p;
  v.min_p = min_p;
  v.repetition_penalty = repetition_penalty;
  v.presence_penalty = presence_penalty;
  v.frequency_penalty = frequency_penalty;
  v.max_tokens = max_tokens;
  v.max_speculative_tokens = max_speculative_tokens;
  v.min_tokens = min_tokens;
  v.logprobs = logprobs;
  BATON_RETURN_IF_ERROR(check_sampling_ranges(v));
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
  if (response_format.size() > kMaxResponseFormatBytes) {
    return absl::InvalidArgumentError(
        str_cat("response_format has ", response_format.size(), " bytes; at most ", kMaxResponseFormatBytes));
  }
  if (logit_bias.size() > kMaxLogitBiasTokens) {
    return absl::InvalidArgumentError(
        str_cat("logit_bias has ", logit_bias.size(), " tokens; at most ", kMaxLogitBiasTokens));
  }
  for (std::size_t i = 0; i < logit_bias.size(); ++i) {
    const auto [token, bias] = logit_bias[i];
    BATON_RETURN_IF_ERROR(check_logit_bias_entry(token, bias));
    if (token >= vocab_size) {
      return absl::InvalidArgumentError(
          str_cat("logit_bias: token id ", token, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (i > 0 && token <= logit_bias[i - 1].first) {
      return absl::InvalidArgumentError(str_cat("logit_bias: token ids must be sorted and unique (", token,
                                                " after ", logit_bias[i - 1].first, ")"));
    }
  }
  for (std::size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return absl::InvalidArgumentError(str_cat("stop[", i, "] must be a non-empty string"));
    if (stop[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(
          str_cat("stop[", i, "] has ", stop[i].size(), " bytes; at most ", kMaxStopStringBytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
