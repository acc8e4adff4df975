// Deciding when a request is finished: EOS and stop token ids, max_tokens, stop strings.
//
// Stop strings are matched on the detokenized output, so the checker needs a TextDecoder
// (tokenizer/text_decoder.h: the engine's only view of the tokenizer; without a tokenizer,
// requests with stop strings are rejected up front). The checker feeds the decoder each new token
// once and each new byte of text once through an Aho–Corasick automaton of the stop strings
// (stop_automaton.h), so the work over a request is linear in its output whatever the number and
// length of its stop strings (plus building the automaton once). It holds back text that might be
// the start of a stop string, so streamed text never contains a stop string that is later cut
// away. Must not: copy or rescan the text so far on every token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/sample/sampling_params.h"
#include "engine/sample/stop_automaton.h"
#include "tokenizer/text_decoder.h"

namespace baton {

// kError: the engine finished the request because of a fault of its own (its proposer or state);
// the output carries the message. Other requests are unaffected.
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
// "stop", "length", "abort", "error"; "none" for kNone (a running request: OpenAI's finish_reason
// is null).
const char* finish_reason_name(FinishReason r);

struct StopDecision {
  FinishReason reason = FinishReason::kNone;
  std::optional<std::int32_t> stop_token;       // the EOS / stop id that ended it
  std::optional<std::string> stop_string;       // the stop string that ended it
  // How many bytes at the start of StopChecker::text() may be shown now: the text of the output so
  // far, minus a held-back tail that could still turn into a stop string, and cut before a matched
  // stop string unless include_stop_str_in_output. 0 without a decoder.
  std::size_t visible_len = 0;
};

// Rules, first match wins (n = output_tokens.size(), the new token is the last one):
//   1. n >= min_tokens and the new token is in stop_token_ids, or (unless ignore_eos) in the EOS
//      ids: kStop with stop_token; its text is left out of the visible text unless
//      include_stop_str_in_output (as vLLM does).
//   2. n > min_tokens (stop strings only count in text of tokens after the first min_tokens, as
//      in vLLM) and a stop string occurs ending in text that is new since the previous call:
//      kStop with stop_string, the earliest occurrence (on equal starts the one listed first);
//      the visible text ends before it, or after it with include_stop_str_in_output.
//   3. n >= max_tokens: kLength with the full text.
// While running, the visible text is the text minus its longest tail that is a proper prefix of a
// stop string. With include_stop_str_in_output nothing is held back: a later match only appends.
// visible_len never decreases from one call to the next, the final one included, and text() is
// only ever appended to: a caller streams text().substr(sent, visible_len - sent) and keeps `sent`.
//
// params, eos_token_ids and decoder must outlive the checker; decoder may be null only when
// params.stop is empty (the visible text is then empty). One checker per request; not thread-safe.
class StopChecker {
 public:
  StopChecker(const SamplingParams& params, std::span<const std::int32_t> eos_token_ids, TextDecoder* decoder);

  // Call after each appended token with the whole output so far (a view: tokens already passed
  // must not change). Feeds the decoder the tokens it has not seen yet.
  StopDecision check(std::span<const std::int32_t> output_tokens);

  // The decoded output; a decision's visible_len bytes of it may be shown. Empty without a decoder.
  std::string_view text() const;

  // Bytes of text fed to the stop-string automaton so far, over all calls: each byte of the text
  // once, whatever the stop strings (a test holds it to that).
  std::size_t searched_bytes() const { return searched_bytes_; }

 private:
  // Feeds the decoder tokens [fed_, tokens.size()).
  void feed(std::span<const std::int32_t> tokens);


  const SamplingParams& params_;
  std::span<const std::int32_t> eos_;
  TextDecoder* decoder_;
  std::size_t fed_ = 0;           // output tokens given to the decoder
  std::unique_ptr<StopAutomaton> automaton_;  // null without stop strings
  std::size_t searched_len_ = 0;  // text bytes already fed to the automaton
  std::size_t searched_bytes_ = 0;
};

}  // namespace baton
