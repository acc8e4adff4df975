// TokenizerTextDecoder: the TextDecoder the engine uses for stop strings and streamed text, backed by
// a Tokenizer's DecodeStream, so a request's text only ever grows: an incomplete UTF-8 character at
// the end is held back until the token that completes it arrives.
//
// Part of baton_tokenizer; the engine never includes this header (it sees only TextDecoder).
// Whoever owns the Tokenizer wires it in with Engine::set_text_decoder_factory. Holds a reference
// to the Tokenizer, which must outlive it. One per request; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tokenizer/text_decoder.h"
#include "tokenizer/tokenizer.h"

namespace baton {

class TokenizerTextDecoder final : public TextDecoder {
 public:
  TokenizerTextDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  void append(std::span<const std::int32_t> new_tokens) override;
  void finish() override;
  const std::string& text() const override { return text_; }

 private:
  DecodeStream stream_;
  std::string text_;
  bool finished_ = false;
};

}  // namespace baton
