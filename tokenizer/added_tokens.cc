#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <climits>

#include "common/status.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/unicode.h"

namespace baton {

namespace {

// The last / first code point of a string (s non-empty, valid UTF-8).
char32_t last_code_point(std::string_view s) {
  std::size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return unicode::next_code_point(s, start);
}

char32_t first_code_point(std::string_view s) {
  std::size_t pos = 0;
  return unicode::next_code_point(s, pos);
}

// Start of the whitespace run that ends s (s.size() when s does not end in whitespace).
std::size_t trailing_space_start(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::size_t pos = start;
    if (!unicode::is_whitespace(unicode::next_code_point(s, pos))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts s.
std::size_t leading_space_length(std::string_view s) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t next = pos;
    if (!unicode::is_whitespace(unicode::next_code_point(s, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Matcher::add(std::string_view pattern, std::int32_t token_index) {
  if (pattern.empty()) return;
  empty_ = false;
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  std::int32_t node = 0;
  for (char ch : pattern) {
    auto c = static_cast<unsigned char>(ch);
    std::int32_t next = -1;
    for (const auto& [byte, child] : nodes_[node].children) {
      if (byte == c) next = child;
    }
    if (next < 0) {
      next = static_cast<std::int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(c, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  // With duplicate patterns the first one added wins (the trie keeps one id per pattern).
  if (nodes_[node].token_index < 0) nodes_[node].token_index = token_index;
}

std::pair<std::int32_t, std::size_t> AddedVocabulary::Matcher::longest_at(std::string_view text,
                                                                          std::size_t pos) const {
  std::pair<std::int32_t, std::size_t> best{-1, 0};
  std::int32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    std::int32_t next = -1;
    for (const auto& [byte, child] : nodes_[node].children) {
      if (byte == c) {
        next = child;
        break;
      }
    }
    if (next < 0) break;
    node = next;
    if (nodes_[node].token_index >= 0) best = {nodes_[node].token_index, i + 1};
  }
  return best;
}

void AddedVocabulary::Matcher::split(std::string_view text, const AddedVocabulary& vocab,
                                     std::vector<TextSegment>& out) const {
  out.clear();
  std::size_t start_offset = 0;  // end of what has been emitted so far
  if (!empty_) {
    std::size_t pos = 0;
    while (pos < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      auto [index, match_end] = longest_at(text, pos);
      if (index < 0) {
        ++pos;
        continue;
      }
      const AddedToken& token = vocab.tokens_[index];
      std::size_t start = pos, stop = match_end;
      pos = match_end;  // the next search resumes after this match even if it is discarded
      if (token.single_word) {
        bool word_before = start > 0 && unicode::is_word_char(last_code_point(text.substr(0, start)));
        bool word_after = stop < text.size() && unicode::is_word_char(first_code_point(text.substr(stop)));
        if (word_before || word_after) continue;
      }
      if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
      if (token.rstrip) stop += leading_space_length(text.substr(stop));
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, token.id});
      start_offset = stop;
    }
  }
  if (start_offset < text.size() || out.empty()) out.push_back({start_offset, text.size(), -1});
}

absl::StatusOr<std::unique_ptr<AddedVocabulary>> AddedVocabulary::from_json(
    const nlohmann::json& tokens, const Normalizer* normalizer,
    const std::function<std::optional<std::int32_t>(std::string_view)>& model_token_to_id, std::int32_t model_size,
    const std::string& where) {
  using json_fields::get_bool_or;
  auto vocab = std::make_unique<AddedVocabulary>();
  if (tokens.is_null()) return vocab;
  if (!tokens.is_array()) return absl::InvalidArgumentError(str_cat(where, ": expected an array"));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    std::string at = str_cat(where, "[", i, "]");
    if (!t.is_object()) return absl::InvalidArgumentError(str_cat(at, ": expected an object"));
    AddedToken token;
    BATON_ASSIGN_OR_RETURN(long long id, json_fields::get_int_or(t, at, "id", -1));
    if (id < 0 || id > INT32_MAX) return absl::InvalidArgumentError(str_cat(at, ".id: expected a non-negative id"));
    token.id = static_cast<std::int32_t>(id);
    BATON_ASSIGN_OR_RETURN(token.content, json_fields::get_string(t, at, "content"));
    BATON_ASSIGN_OR_RETURN(token.special, get_bool_or(t, at, "special", false));
    BATON_ASSIGN_OR_RETURN(token.lstrip, get_bool_or(t, at, "lstrip", false));
    BATON_ASSIGN_OR_RETURN(token.rstrip, get_bool_or(t, at, "rstrip", false));
    BATON_ASSIGN_OR_RETURN(token.single_word, get_bool_or(t, at, "single_word", false));
    BATON_ASSIGN_OR_RETURN(token.normalized, get_bool_or(t, at, "normalized", !token.special));
    if (token.content.empty()) continue;
    if (auto known = vocab->token_to_id(token.content)) {
      token.id = *known;
    } else if (auto model_id = model_token_to_id(token.content)) {
      token.id = *model_id;
    } else {
      std::int32_t max_added = -1;
      for (const auto& [content, added_id] : vocab->content_to_id_) max_added = std::max(max_added, added_id);
      token.id = max_added >= model_size ? max_added + 1 : model_size;
    }
    if (token.special) vocab->special_contents_.insert(token.content);
    vocab->content_to_id_.insert_or_assign(token.content, token.id);
    vocab->tokens_.push_back(std::move(token));
  }
  // Hugging Face matches special tokens first, then the others, in file order; on equal patterns
  // the first one registered wins.
  std::vector<std::int32_t> order;
  for (std::size_t i = 0; i < vocab->tokens_.size(); ++i) {
    if (vocab->tokens_[i].special) order.push_back(static_cast<std::int32_t>(i));
  }
  for (std::size_t i = 0; i < vocab->tokens_.size(); ++i) {
    if (!vocab->tokens_[i].special) order.push_back(static_cast<std::int32_t>(i));
  }
  for (std::size_t i = 0; i < vocab->tokens_.size(); ++i) {
    vocab->id_to_index_.insert_or_assign(vocab->tokens_[i].id, static_cast<std::int32_t>(i));
  }
  for (std::int32_t index : order) {
    AddedToken& token = vocab->tokens_[index];
    token.decoded = token.content;
    if (!token.normalized) {
      vocab->raw_.add(token.content, index);
    } else {
      if (normalizer != nullptr) normalizer->normalize(token.decoded);
      vocab->normalized_.add(token.decoded, index);
    }
  }
  return vocab;
}

std::optional<std::int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = content_to_id_.find(content);
  if (it == content_to_id_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::find(std::int32_t id) const {
  auto it = id_to_index_.find(id);
  return it == id_to_index_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace baton
