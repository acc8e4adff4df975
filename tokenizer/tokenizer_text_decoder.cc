#include "tokenizer/tokenizer_text_decoder.h"

#include "common/status.h"

namespace baton {

TokenizerTextDecoder::TokenizerTextDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : stream_(tokenizer, skip_special_tokens) {}

void TokenizerTextDecoder::append(std::span<const std::int32_t> new_tokens) {
  BATON_CHECK(!finished_, "TextDecoder::append of ", new_tokens.size(), " tokens after finish()");
  for (std::int32_t id : new_tokens) text_ += stream_.step(id);
}

void TokenizerTextDecoder::finish() {
  if (finished_) return;
  text_ += stream_.flush();
  finished_ = true;
}

}  // namespace baton
