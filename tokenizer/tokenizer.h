// Baton's tokenizer: Hugging Face tokenizer.json (BPE models, byte-level and SentencePiece-style)
// plus tokenizer_config.json's special tokens and chat template. Token ids are identical to
// Hugging Face `tokenizers` for every file it loads; a file using a feature Baton does not
// implement fails to load with an error naming the feature rather than tokenizing differently.
//
// Thread-safety: a loaded Tokenizer is immutable; every const method may be called from many
// threads at once. A DecodeStream belongs to one request (one thread at a time).
//
// Must not: pad or truncate (tokenizer.json "padding"/"truncation" are ignored: the engine decides
// lengths), encode pairs of sequences, or depend on engine/ or kernels/ (the router links this
// library without the model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton {

class AddedVocabulary;
class BpeModel;
class ChatTemplate;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;

class Tokenizer {
 public:
  // dir holds tokenizer.json + tokenizer_config.json (+ special_tokens_map.json when present).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& dir);
  static bool has_tokenizer_files(const std::string& dir);
  ~Tokenizer();

  // add_special_tokens: apply the post-processor (BOS etc.) exactly like HF encode(text,
  // add_special_tokens). Invalid UTF-8 in `text` is first repaired to U+FFFD.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Unknown ids are skipped (as Hugging Face does); the result is always valid UTF-8.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const;
  std::int32_t vocab_size() const;  // 1 + the largest id, added tokens included
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::int32_t id) const;
  // Each id's share of a decoded text, as raw bytes (a byte-level token may end inside a UTF-8
  // character): what the token adds when it stands between two others. Empty for special tokens
  // and ids without a token. For constrained decoding's token masks.
  std::vector<std::string> token_bytes() const;
  std::optional<std::int32_t> bos_token_id() const;  // from tokenizer_config.json
  std::vector<std::int32_t> eos_token_ids() const;   // from tokenizer_config.json
  bool has_chat_template() const { return chat_template_ != nullptr; }
  // Replaces tokenizer_config.json's chat template (vLLM's --chat-template): `source` is the Jinja
  // text, `origin` what errors name (e.g. "--chat-template FILE").
  absl::Status set_chat_template(const std::string& source, const std::string& origin);
  // Renders the chat template (tokenizer_config.json's, or set_chat_template's) as transformers'
  // apply_chat_template does. messages: a JSON array of {"role", "content", ...} (an assistant's
  // "tool_calls", a tool's "tool_call_id" as OpenAI sends them); tools: OpenAI's tool list, the
  // template's `tools` (left undefined when null or empty). Objects reach the template in their
  // order (see ChatTemplate::render).
  absl::StatusOr<std::string> apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                                  const nlohmann::ordered_json& tools = nullptr) const;

 private:
  friend class DecodeStream;
  Tokenizer();
  // What decode() starts from for `id`; nullptr when decode() drops it (an unknown id, or a special
  // token with skip_special_tokens).
  const std::string* decoded_content(std::int32_t id, bool skip_special_tokens) const;
  // True when `id` is a <0xXX> token and the decoder joins byte runs (see DecodeStream).
  bool in_byte_run(std::int32_t id) const;
  // An added token marked special (dropped by decode with skip_special_tokens).
  bool is_special(std::int32_t id) const;
  void encode_text(std::string_view text, bool at_input_start, std::vector<std::int32_t>& ids) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::optional<std::string> bos_token_, eos_token_, unk_token_, pad_token_;
  std::int32_t vocab_size_ = 0;
};

// Streaming detokenizer: feed tokens one at a time, get the newly completed text; never emits a
// partial UTF-8 character; concatenation of every step() and the final flush() equals
// decode(all ids). Holds a reference to the Tokenizer, which must outlive it.
class DecodeStream {
 public:
  DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens);
  std::string step(std::int32_t id);
  // Text still held back (e.g. an incomplete character at the end of the stream).
  std::string flush();
  // Ids the next step() decodes again with the new one: the last emitted token(s) and those not
  // emitted yet (an incomplete character, an open byte run). Tokens decode() drops are not kept,
  // so this stays small and a stream's work is linear in its length.
  std::size_t window_size() const { return window_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<std::int32_t> window_;  // ids whose text was emitted last (prefix) + ids not yet emitted
  std::size_t prefix_ids_ = 0;        // how many ids at the start of window_ form the prefix
  std::string prefix_text_;           // decode(prefix ids), standalone
};

}  // namespace baton
