// The ranges of the sampling parameters (vLLM's and OpenAI's meaning), in one place for both doors
// a request comes through: the engine (SamplingParams::validate) and the router, which refuses a
// bad value as the client's INVALID_ARGUMENT before any node spends anything on it (and before it
// could count as a node's error).
//
// Must not: know protos, requests or defaults; it checks the values it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace baton {

// Unset: not checked (its default is in range).
struct SamplingValues {
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<std::int32_t> top_k, max_tokens, min_tokens, max_speculative_tokens, logprobs;
};

inline constexpr std::int32_t kMaxLogprobs = 20;  // vLLM's default max_logprobs
// logit_bias (OpenAI's meaning: added to a token's logit before anything else): each bias in
// [-100, 100], at most this many tokens per request.
inline constexpr float kMaxAbsLogitBias = 100.0f;
inline constexpr std::size_t kMaxLogitBiasTokens = 1024;
// response_format (OpenAI's object as JSON text): at most this many bytes.
inline constexpr std::size_t kMaxResponseFormatBytes = 64 * 1024;

// InvalidArgument naming the first field out of range ("top_p must be in (0, 1], got 2"); NaN
// and infinities are out of every range. min_tokens is checked against max_tokens when both are set.
absl::Status check_sampling_ranges(const SamplingValues& v);

// InvalidArgument "logit_bias: ..." for a token id below 0 or a bias outside [-100, 100] (NaN
// included). The upper bound of a token id is the model's vocabulary, which only a node knows.
absl::Status check_logit_bias_entry(std::int32_t token, float bias);

}  // namespace baton
