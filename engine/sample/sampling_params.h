// SamplingParams: what a request asks of the sampler, with the same meaning as vLLM's
// SamplingParams / the OpenAI API. Validation names the offending field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/sampling_ranges.h"

namespace baton {

struct SamplingParams {
  static constexpr std::int32_t kMaxLogprobs = baton::kMaxLogprobs;  // vLLM's default max_logprobs
  // Hard bounds on what one request may ask of the engine thread (the router's defaults are lower):
  // building a request's stop-string automaton is linear in their total size (at most 1 MiB).
  static constexpr std::size_t kMaxStopStrings = 1024;
  static constexpr std::size_t kMaxStopStringBytes = 1024;
  static constexpr std::size_t kMaxStopTokenIds = 1024;

  // Values <= 1e-5 mean greedy (argmax after penalties).
  float temperature = 1.0f;
  std::int32_t top_k = 0;       // 0 or -1: off; >= vocab: off
  float top_p = 1.0f;           // (0, 1]; 1: off
  float min_p = 0.0f;           // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off. Applies to tokens in prompt and output.
  float presence_penalty = 0.0f;    // [-2, 2]; applies to tokens in the output only
  float frequency_penalty = 0.0f;   // [-2, 2]; applies to tokens in the output only
  std::optional<std::uint64_t> seed;  // same seed, same tokens, whatever else is in the batch
  std::int32_t max_tokens = 16;     // >= 1
  std::int32_t min_tokens = 0;      // EOS, stop ids and stop strings are suppressed until this many are out
  std::vector<std::int32_t> stop_token_ids;
  std::vector<std::string> stop;    // stop strings (need a detokenizer)
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  std::int32_t logprobs = -1;       // -1: none; n in [0, 20]: sampled token's logprob plus the top n
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) pairs, each bias added to its token's
  // logit before penalties and everything else, in sampling and in verification alike (so
  // speculation stays lossless with respect to the biased distribution). Sorted by token id, each
  // token once. Reported logprobs stay the model's own.
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  // OpenAI's response_format as JSON text ({"type": "json_object"} or {"type": "json_schema",
  // "json_schema": {"schema": ...}}); empty: free text. The engine constrains the output to it
  // with a token mask on every row it samples or verifies (engine/structured/). At most 64 KiB.
  std::string response_format;  // at most kMaxResponseFormatBytes
  // Caps the engine's num_speculative_tokens for this request (it can only lower it): 0 turns
  // speculation off, so every step verifies one position, i.e. is a plain decode step. Not a
  // sampling setting in vLLM's sense, but it travels with the request the same way. nullopt: no cap.
  std::optional<std::int32_t> max_speculative_tokens;

  bool greedy() const { return temperature <= 1e-5f; }
  // InvalidArgument naming the first offending field, its value and the allowed range.
  // vocab_size bounds stop_token_ids.
  absl::Status validate(std::int32_t vocab_size) const;
};

}  // namespace baton
