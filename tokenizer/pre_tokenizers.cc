#include "tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <cctype>
#include <functional>

#include "common/status.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace baton {

namespace {

using json_fields::get_bool_or;
using json_fields::get_string;
using json_fields::get_string_or;

// How a Split treats the delimiters it finds (HF SplitDelimiterBehavior).
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Segment {
  std::size_t begin, end;
  bool is_match;
};

// Turns matches into segments covering all of `size` bytes (HF Pattern::find_matches).
void cover(std::size_t size, const std::vector<RegexMatch>& matches, std::vector<Segment>& segments) {
  segments.clear();
  std::size_t prev = 0;
  for (const auto& m : matches) {
    if (prev != m.begin) segments.push_back({prev, m.begin, false});
    segments.push_back({m.begin, m.end, true});
    prev = m.end;
  }
  if (prev != size) segments.push_back({prev, size, false});
}

// Applies `behavior` to segments of `piece` and appends the resulting sub-pieces to `out`.
void emit_split(std::string_view piece, bool at_input_start, std::vector<Segment>& segments, Behavior behavior,
                bool invert, PieceList& out) {
  if (invert) {
    for (auto& s : segments) s.is_match = !s.is_match;
  }
  std::vector<Segment> merged;
  switch (behavior) {
    case Behavior::kIsolated:
      merged = segments;
      for (auto& s : merged) s.is_match = false;
      break;
    case Behavior::kRemoved:
      merged = segments;  // is_match means "drop"
      break;
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const auto& s : segments) {
        if (s.is_match == previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& s : segments) {
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool next_match = false;  // walking right to left
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !next_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back({it->begin, it->end, false});
        }
        next_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  for (const auto& s : merged) {
    if (s.is_match) continue;
    out.push(piece.substr(s.begin, s.end - s.begin), at_input_start && s.begin == 0);
  }
}

// Matches of a character predicate: each matching character is its own match.
void char_matches(std::string_view text, const std::function<bool(char32_t)>& predicate,
                  std::vector<RegexMatch>& matches) {
  matches.clear();
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t start = pos;
    char32_t cp = unicode::next_code_point(text, pos);
    if (predicate(cp)) matches.push_back({start, pos});
  }
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> children)
      : children_(std::move(children)) {}
  void pre_tokenize(const PieceList& in, PieceList& out) const override {
    if (children_.empty()) {
      for (const auto& p : in.pieces()) out.push(in.view(p), p.at_input_start);
      return;
    }
    PieceList buffers[2];
    const PieceList* current = &in;
    for (std::size_t i = 0; i < children_.size(); ++i) {
      bool last = i + 1 == children_.size();
      PieceList& next = last ? out : buffers[i % 2];
      if (!last) next.clear();
      children_[i]->pre_tokenize(*current, next);
      current = &next;
    }
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> children_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string literal, std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : literal_(std::move(literal)), regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(const PieceList& in, PieceList& out) const override {
    std::vector<RegexMatch> matches;
    std::vector<Segment> segments;
    for (const auto& p : in.pieces()) {
      std::string_view piece = in.view(p);
      matches.clear();
      if (regex_) {
        regex_->find_all(piece, matches);
      } else if (!literal_.empty()) {
        for (std::size_t pos = piece.find(literal_); pos != std::string_view::npos;
             pos = piece.find(literal_, pos + literal_.size())) {
          matches.push_back({pos, pos + literal_.size()});
        }
      }
      cover(piece.size(), matches, segments);
      emit_split(piece, p.at_input_start, segments, behavior_, invert_, out);
    }
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

// Splits with a per-character predicate (Digits, Punctuation, WhitespaceSplit).
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(std::function<bool(char32_t)> predicate, Behavior behavior)
      : predicate_(std::move(predicate)), behavior_(behavior) {}
  void pre_tokenize(const PieceList& in, PieceList& out) const override {
    std::vector<RegexMatch> matches;
    std::vector<Segment> segments;
    for (const auto& p : in.pieces()) {
      std::string_view piece = in.view(p);
      char_matches(piece, predicate_, matches);
      cover(piece.size(), matches, segments);
      emit_split(piece, p.at_input_start, segments, behavior_, false, out);
    }
  }

 private:
  std::function<bool(char32_t)> predicate_;
  Behavior behavior_;
};

// GPT-2 byte-level: optional prefix space, the GPT-2 split regex, then bytes -> stand-in chars.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void pre_tokenize(const PieceList& in, PieceList& out) const override {
    const auto& table = unicode::byte_level_table();
    std::vector<RegexMatch> matches;
    std::string prefixed;
    for (const auto& p : in.pieces()) {
      std::string_view piece = in.view(p);
      if (add_prefix_space_ && piece.front() != ' ') {
        prefixed.clear();
        prefixed.push_back(' ');
        prefixed.append(piece);
        piece = prefixed;
      }
      matches.clear();
      if (regex_) {
        regex_->find_all(piece, matches);
        // Isolated: matches and the gaps between them are all pieces.
        std::size_t prev = 0;
        std::vector<RegexMatch> all;
        for (const auto& m : matches) {
          if (prev != m.begin) all.push_back({prev, m.begin});
          all.push_back(m);
          prev = m.end;
        }
        if (prev != piece.size()) all.push_back({prev, piece.size()});
        matches.swap(all);
      } else {
        matches.push_back({0, piece.size()});
      }
      for (const auto& m : matches) {
        if (m.end == m.begin) continue;
        out.open_piece(p.at_input_start && m.begin == 0);
        std::string& text = out.text_for_last();
        for (std::size_t i = m.begin; i < m.end; ++i) text.append(table.byte_to_utf8[static_cast<unsigned char>(piece[i])]);
        out.close_piece();
      }
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// SentencePiece-style: spaces become the replacement character (U+2581), optionally prepended,
// then the text is split before each replacement character.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(const PieceList& in, PieceList& out) const override {
    std::string text;
    std::vector<RegexMatch> matches;
    std::vector<Segment> segments;
    for (const auto& p : in.pieces()) {
      std::string_view piece = in.view(p);
      text.clear();
      for (char c : piece) {
        if (c == ' ') {
          text.append(replacement_);
        } else {
          text.push_back(c);
        }
      }
      bool starts_with_replacement = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts_with_replacement &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_input_start))) {
        text.insert(0, replacement_);
      }
      if (!split_) {
        out.push(text, p.at_input_start);
        continue;
      }
      matches.clear();
      for (std::size_t pos = text.find(replacement_); pos != std::string::npos;
           pos = text.find(replacement_, pos + replacement_.size())) {
        matches.push_back({pos, pos + replacement_.size()});
      }
      cover(text.size(), matches, segments);
      emit_split(text, p.at_input_start, segments, Behavior::kMergedWithNext, false, out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

absl::StatusOr<Behavior> parse_behavior(const nlohmann::json& config, const std::string& where) {
  BATON_ASSIGN_OR_RETURN(std::string name, get_string(config, where, "behavior"));
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(str_cat(where, ".behavior: unknown split behavior \"", name,
                                            "\" (expected Removed, Isolated, MergedWithPrevious, "
                                            "MergedWithNext or Contiguous)"));
}

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config,
                                                                 const std::string& where) {
  BATON_ASSIGN_OR_RETURN(std::string type, json_fields::get_type(config, where));
  if (type == "Sequence") {
    auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError(str_cat(where, ".pretokenizers: expected an array"));
    }
    std::vector<std::unique_ptr<PreTokenizer>> children;
    for (std::size_t i = 0; i < it->size(); ++i) {
      BATON_ASSIGN_OR_RETURN(auto child, make_pre_tokenizer((*it)[i], str_cat(where, ".pretokenizers[", i, "]")));
      children.push_back(std::move(child));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(children));
  }
  if (type == "Split") {
    std::string literal;
    std::unique_ptr<Regex> regex;
    BATON_RETURN_IF_ERROR(parse_pattern(config, where, literal, regex));
    BATON_ASSIGN_OR_RETURN(Behavior behavior, parse_behavior(config, where));
    BATON_ASSIGN_OR_RETURN(bool invert, get_bool_or(config, where, "invert", false));
    return std::make_unique<SplitPreTokenizer>(std::move(literal), std::move(regex), behavior, invert);
  }
  if (type == "ByteLevel") {
    BATON_ASSIGN_OR_RETURN(bool add_prefix_space, get_bool_or(config, where, "add_prefix_space", true));
    BATON_ASSIGN_OR_RETURN(bool use_regex, get_bool_or(config, where, "use_regex", true));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      auto compiled = Regex::compile(kGpt2Pattern);
      BATON_CHECK(compiled.ok(), "GPT-2 pattern must compile: ", compiled.status().message());
      regex = std::move(compiled).value();
    }
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Metaspace") {
    BATON_ASSIGN_OR_RETURN(std::string replacement, get_string_or(config, where, "replacement", "\xE2\x96\x81"));
    PrependScheme scheme = PrependScheme::kAlways;
    if (config.contains("prepend_scheme")) {
      BATON_ASSIGN_OR_RETURN(std::string name, get_string(config, where, "prepend_scheme"));
      if (name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return absl::InvalidArgumentError(str_cat(where, ".prepend_scheme: unknown value \"", name,
                                                  "\" (expected always, first or never)"));
      }
    } else {
      BATON_ASSIGN_OR_RETURN(bool add_prefix_space, get_bool_or(config, where, "add_prefix_space", true));
      scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    BATON_ASSIGN_OR_RETURN(bool split, get_bool_or(config, where, "split", true));
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
  }
  if (type == "Digits") {
    BATON_ASSIGN_OR_RETURN(bool individual, get_bool_or(config, where, "individual_digits", false));
    return std::make_unique<CharSplitPreTokenizer>(unicode::is_numeric, individual ? Behavior::kIsolated : Behavior::kContiguous);
  }
  if (type == "Punctuation") {
    Behavior behavior = Behavior::kIsolated;
    if (config.contains("behavior")) {
      BATON_ASSIGN_OR_RETURN(behavior, parse_behavior(config, where));
    }
    auto punct = [](char32_t cp) {
      return (cp < 0x80 && std::ispunct(static_cast<int>(cp))) || unicode::is_punctuation(cp);
    };
    return std::make_unique<CharSplitPreTokenizer>(punct, behavior);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharSplitPreTokenizer>(unicode::is_whitespace, Behavior::kRemoved);
  }
  if (type == "Whitespace") {
    auto compiled = Regex::compile(R"(\w+|[^\w\s]+)");
    BATON_CHECK(compiled.ok(), "Whitespace pattern must compile: ", compiled.status().message());
    return std::make_unique<SplitPreTokenizer>("", std::move(compiled).value(), Behavior::kRemoved, true);
  }
  return json_fields::unsupported(where, "pre-tokenizer", type,
                                  "Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, "
                                  "WhitespaceSplit");
}

}  // namespace baton
