// tokenizer_config.json (+ special_tokens_map.json): the special-token strings (bos/eos/unk/pad)
// and the chat template, which tokenizer.json does not carry.
//
// Must not: resolve token strings to ids (Tokenizer does that with its vocabulary).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace baton {

struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, unk_token, pad_token;
  std::optional<std::string> chat_template;  // the "default" one when several are named
};

// Reads dir/tokenizer_config.json (required) and dir/special_tokens_map.json (optional; fills
// tokens tokenizer_config.json lacks).
absl::StatusOr<TokenizerConfig> load_tokenizer_config(const std::string& dir);

}  // namespace baton
