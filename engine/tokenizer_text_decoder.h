// TokenizerTextDecoder: the engine's TextDecoder (stop strings, streamed text) backed by a
// Tokenizer's streaming detokenizer, so a request's text only ever grows: an incomplete UTF-8
// character at the end is held back until the token that completes it arrives.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "engine/sample/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace baton {

class TokenizerTextDecoder final : public TextDecoder {
 public:
  TokenizerTextDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
      : stream_(tokenizer, skip_special_tokens) {}

  // Feeds the tokens not seen yet; returns all text so far. Tokens must only ever be appended.
  std::string decode(std::span<const std::int32_t> output_tokens, bool final) override {
    for (; fed_ < output_tokens.size(); ++fed_) text_ += stream_.step(output_tokens[fed_]);
    if (final) text_ += stream_.flush();
    return text_;
  }

 private:
  DecodeStream stream_;
  std::size_t fed_ = 0;
  std::string text_;
};

}  // namespace baton
