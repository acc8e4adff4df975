// Added tokens of tokenizer.json ("added_tokens"): tokens matched in the raw (or normalized) text
// before the model sees it, with their flags: special (skippable when decoding), lstrip/rstrip
// (absorb neighbouring whitespace), single_word (only between non-word characters) and normalized
// (matched in normalized text rather than raw text). Matching is leftmost-longest over all
// tokens, as Hugging Face's Aho-Corasick matcher does.
//
// Must not: run the model or the pre-tokenizer; it only finds where added tokens are.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizer/vocab_map.h"

namespace baton {

class Normalizer;

struct AddedToken {
  std::int32_t id = -1;
  std::string content;
  // What decoding prints for this id: `content`, or for a normalized token its normalized form
  // (Hugging Face stores normalized tokens that way: "<sep>" decodes as "▁<sep>" after Prepend).
  std::string decoded;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A stretch of text: either an added token (id >= 0) or text still to be tokenized (id < 0).
struct TextSegment {
  std::size_t begin, end;  // bytes in the text that was split
  std::int32_t id;
};

class AddedVocabulary {
 public:
  // `tokens` is tokenizer.json's "added_tokens" array. `normalizer` (may be null) prepares the
  // patterns of normalized tokens, as the text they are matched in is normalized.
  //
  // Ids are assigned as Hugging Face assigns them when it loads the file, whatever "id" says: the
  // model's id for a token the model vocab has, else the next id after the model's `model_size`
  // entries (or after the largest added id). Consistent files declare exactly these ids.
  static absl::StatusOr<std::unique_ptr<AddedVocabulary>> from_json(
      const nlohmann::json& tokens, const Normalizer* normalizer,
      const std::function<std::optional<std::int32_t>(std::string_view)>& model_token_to_id,
      std::int32_t model_size, const std::string& where);

  // Splits raw text on tokens with normalized == false.
  void split_raw(std::string_view text, std::vector<TextSegment>& out) const { raw_.split(text, *this, out); }
  // Splits normalized text on tokens with normalized == true.
  void split_normalized(std::string_view text, std::vector<TextSegment>& out) const {
    normalized_.split(text, *this, out);
  }

  std::optional<std::int32_t> token_to_id(std::string_view content) const;
  const AddedToken* find(std::int32_t id) const;
  bool is_special(std::string_view content) const { return special_contents_.find(content) != special_contents_.end(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Leftmost-longest matcher over a set of patterns: a byte trie walked from each start position
  // whose first byte can begin a pattern.
  class Matcher {
   public:
    void add(std::string_view pattern, std::int32_t token_index);
    void split(std::string_view text, const AddedVocabulary& vocab, std::vector<TextSegment>& out) const;

   private:
    struct Node {
      std::vector<std::pair<unsigned char, std::int32_t>> children;  // byte -> node index
      std::int32_t token_index = -1;                                 // a pattern ends here
    };
    // Longest pattern starting at text[pos]: (token index, end) or token index -1.
    std::pair<std::int32_t, std::size_t> longest_at(std::string_view text, std::size_t pos) const;
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
    bool empty_ = true;
  };

  std::vector<AddedToken> tokens_;
  VocabMap content_to_id_;
  std::unordered_set<std::string, StringViewHash, std::equal_to<>> special_contents_;
  absl::flat_hash_map<std::int32_t, std::int32_t> id_to_index_;  // later entries win
  Matcher raw_, normalized_;
};

}  // namespace baton
