// Deciding when a request is finished: EOS and stop token ids, max_tokens, stop strings.
//
// Stop strings are matched on the detokenized output, so the checker needs a TextDecoder
// (tokenizer/text_decoder.h: the engine's only view of the tokenizer; without a tokenizer,
// requests with stop strings are rejected up front).
// It holds back text that might be the start of a stop string, so streamed text never contains a
// stop string that is later cut away.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "engine/sample/sampling_params.h"
#include "tokenizer/text_decoder.h"

namespace baton {

enum class FinishReason { kNone, kStop, kLength, kAbort };
// "stop", "length", "abort"; "none" for kNone (a running request: OpenAI's finish_reason is null).
const char* finish_reason_name(FinishReason r);

struct StopDecision {
  FinishReason reason = FinishReason::kNone;
  std::optional<std::int32_t> stop_token;       // the EOS / stop id that ended it
  std::optional<std::string> stop_string;       // the stop string that ended it
  // Output text that may be shown now (the text of the output so far, minus a held-back tail that
  // could still turn into a stop string, and cut before a matched stop string unless
  // include_stop_str_in_output).
  std::string visible_text;
};

// Rules, first match wins (n = output_tokens.size(), the new token is the last one):
//   1. n >= min_tokens and the new token is in stop_token_ids, or (unless ignore_eos) in the EOS
//      ids: kStop with stop_token; its text is left out of visible_text unless
//      include_stop_str_in_output (as vLLM does).
//   2. n > min_tokens (stop strings only count in text of tokens after the first min_tokens, as
//      in vLLM) and a stop string occurs ending in text that is new since the previous call:
//      kStop with stop_string, the earliest occurrence (on equal starts the one listed first);
//      visible_text ends before it, or after it with include_stop_str_in_output.
//   3. n >= max_tokens: kLength with the full text.
// While running, visible_text is the text minus its longest tail that is a proper prefix of a stop
// string. With include_stop_str_in_output nothing is held back: a later match only appends.
// Visible texts of successive calls are prefixes of one another, the final one included.
//
// params, eos_token_ids and decoder must outlive the checker; decoder may be null only when
// params.stop is empty (visible_text is then empty). One checker per request; not thread-safe.
class StopChecker {
 public:
  StopChecker(const SamplingParams& params, std::span<const std::int32_t> eos_token_ids, TextDecoder* decoder);

  // Call after each appended token with the whole output so far.
  StopDecision check(std::span<const std::int32_t> output_tokens);

 private:
  // Length of the longest tail of text that is a proper prefix of some stop string.
  std::size_t held_back_length(const std::string& text) const;

  const SamplingParams& params_;
  std::span<const std::int32_t> eos_;
  TextDecoder* decoder_;
  std::size_t searched_len_ = 0;  // text length already searched for stop strings
};

}  // namespace baton
