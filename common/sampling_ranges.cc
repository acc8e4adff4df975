#include "common/sampling_ranges.h"

#include <cmath>

#include "common/status.h"

namespace baton {
namespace {

// Comparisons are written so that NaN fails them: `!(x >= lo)` is true for NaN.
absl::Status out_of_range(const char* field, const auto& value, const std::string& allowed) {
  return absl::InvalidArgumentError(str_cat(field, " must be ", allowed, ", got ", value));
}

}  // namespace

absl::Status check_sampling_ranges(const SamplingValues& v) {
  if (v.temperature && (!(*v.temperature >= 0.0f) || std::isinf(*v.temperature))) {
    return out_of_range("temperature", *v.temperature, "a finite number >= 0 (0: greedy)");
  }
  if (v.top_k && *v.top_k < -1) return out_of_range("top_k", *v.top_k, "-1 or 0 (off) or >= 1");
  if (v.top_p && !(*v.top_p > 0.0f && *v.top_p <= 1.0f)) return out_of_range("top_p", *v.top_p, "in (0, 1]");
  if (v.min_p && !(*v.min_p >= 0.0f && *v.min_p <= 1.0f)) return out_of_range("min_p", *v.min_p, "in [0, 1]");
  if (v.repetition_penalty && (!(*v.repetition_penalty > 0.0f) || std::isinf(*v.repetition_penalty))) {
    return out_of_range("repetition_penalty", *v.repetition_penalty, "a finite number > 0 (1: off)");
  }
  if (v.presence_penalty && !(*v.presence_penalty >= -2.0f && *v.presence_penalty <= 2.0f)) {
    return out_of_range("presence_penalty", *v.presence_penalty, "in [-2, 2]");
  }
  if (v.frequency_penalty && !(*v.frequency_penalty >= -2.0f && *v.frequency_penalty <= 2.0f)) {
    return out_of_range("frequency_penalty", *v.frequency_penalty, "in [-2, 2]");
  }
  if (v.max_tokens && *v.max_tokens < 1) return out_of_range("max_tokens", *v.max_tokens, ">= 1");
  if (v.max_speculative_tokens && *v.max_speculative_tokens < 0) {
    return out_of_range("max_speculative_tokens", *v.max_speculative_tokens, ">= 0 (0: no speculation)");
  }
  if (v.min_tokens && *v.min_tokens < 0) return out_of_range("min_tokens", *v.min_tokens, ">= 0");
  if (v.min_tokens && v.max_tokens && *v.min_tokens > *v.max_tokens) {
    return out_of_range("min_tokens", *v.min_tokens, str_cat("in [0, max_tokens = ", *v.max_tokens, "]"));
  }
  if (v.logprobs && (*v.logprobs < -1 || *v.logprobs > kMaxLogprobs)) {
    return out_of_range("logprobs", *v.logprobs,
                        str_cat("-1 (none) or in [0, ", kMaxLogprobs, "] (at most ", kMaxLogprobs,
                                " top logprobs are returned)"));
  }
  return absl::OkStatus();
}

absl::Status check_logit_bias_entry(std::int32_t token, float bias) {
  if (token < 0) return absl::InvalidArgumentError(str_cat("logit_bias: token id ", token, " is negative"));
  if (!(bias >= -kMaxAbsLogitBias && bias <= kMaxAbsLogitBias)) {
    return absl::InvalidArgumentError(
        str_cat("logit_bias: the bias of token ", token, " must be in [-100, 100], got ", bias));
  }
  return absl::OkStatus();
}

}  // namespace baton
