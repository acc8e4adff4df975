#include "tokenizer/tokenizer_text_decoder.h"

namespace baton {

TokenizerTextDecoder::TokenizerTextDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : stream_(tokenizer, skip_special_tokens) {}

std::string TokenizerTextDecoder::decode(std::span<const std::int32_t> output_tokens, bool final) {
  for (; fed_ < output_tokens.size(); ++fed_) text_ += stream_.step(output_tokens[fed_]);
  if (final) text_ += stream_.flush();
  return text_;
}

}  // namespace baton
