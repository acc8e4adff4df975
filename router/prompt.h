// The public request's prompt as token ids, exactly as `baton generate` makes them (so that output
// through the cluster equals local output): text is encoded with add_special_tokens = true; chat
// messages (with their tool calls, and the tools offered) are rendered with the model's chat
// template (add_generation_prompt: default true) and the rendering encoded with
// add_special_tokens = false (the template writes BOS itself); token ids pass through. Without
// tokenizer files the router is in token-id mode and refuses text and chat.
//
// Also the checks that need no node call beyond the decode node's Info: ids within the vocabulary
// and prompt + max_tokens within max_model_len. Errors are INVALID_ARGUMENT naming the field.
//
// Must not: call nodes, or check sampling parameters (the nodes validate those with the engine's
// own rules and the router forwards their INVALID_ARGUMENT).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/v1/api.pb.h"
#include "tokenizer/tokenizer.h"

namespace baton::router {

// The engine's default when sampling.max_tokens is unset (api.proto: "default 16").
inline constexpr std::int32_t kDefaultMaxTokens = 16;

struct EncodedPrompt {
  std::vector<std::int32_t> ids;
  std::string rendered;  // the chat template's output, or the text given ("" for token ids)
};

class PromptEncoder {
 public:
  // tokenizer: null in token-id mode; must outlive the encoder.
  explicit PromptEncoder(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  bool has_tokenizer() const { return tokenizer_ != nullptr; }

  absl::StatusOr<EncodedPrompt> encode(const baton::v1::GenerateRequest& request) const;
  // Tokenize: text honours add_special_tokens (unset = true, as Generate); chat as Generate.
  absl::StatusOr<EncodedPrompt> encode(const baton::v1::TokenizeRequest& request) const;

 private:
  absl::StatusOr<EncodedPrompt> encode_text(const std::string& field, const std::string& text,
                                            bool add_special_tokens) const;
  absl::StatusOr<EncodedPrompt> encode_chat(const std::string& field, const baton::v1::ChatMessages& chat) const;

  const Tokenizer* tokenizer_;
};

// Ids in [0, vocab_size) and prompt_len + max_tokens (default 16) <= max_model_len; `where` names
// the node whose Info gave the limits. Non-positive limits are not checked.
absl::Status check_prompt_limits(const std::vector<std::int32_t>& ids, const baton::v1::SamplingParams& sampling,
                                 std::int32_t vocab_size, std::int32_t max_model_len, const std::string& where);

}  // namespace baton::router
