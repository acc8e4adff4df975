// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): split normalized text into the pieces the
// model tokenizes independently. Supported: Sequence, Split (String/Regex pattern, every behavior,
// invert), ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit.
//
// Pieces live back to back in one buffer (PieceList) so that a pre-tokenizer pass costs no
// allocation per piece.
//
// Must not: track offsets beyond "does this piece start the input" (all Metaspace needs), or
// accept an unknown type (make_pre_tokenizer fails naming it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton {

class PieceList {
 public:
  struct Piece {
    std::uint32_t begin, end;  // byte range in text()
    bool at_input_start;       // the piece starts at offset 0 of the original input
  };
  void clear() {
    text_.clear();
    pieces_.clear();
  }
  // Appends a copy of `s` as a new piece (`s` must not point into this list). Empty pieces are
  // dropped, as Hugging Face drops them.
  void push(std::string_view s, bool at_input_start) {
    if (s.empty()) return;
    auto begin = static_cast<std::uint32_t>(text_.size());
    text_.append(s);
    pieces_.push_back({begin, static_cast<std::uint32_t>(text_.size()), at_input_start});
  }
  // Appends an empty piece whose text the caller then appends with text_for_last().
  void open_piece(bool at_input_start) {
    auto begin = static_cast<std::uint32_t>(text_.size());
    pieces_.push_back({begin, begin, at_input_start});
  }
  std::string& text_for_last() { return text_; }
  void close_piece() {
    pieces_.back().end = static_cast<std::uint32_t>(text_.size());
    if (pieces_.back().end == pieces_.back().begin) pieces_.pop_back();
  }
  std::string_view view(const Piece& p) const { return std::string_view(text_).substr(p.begin, p.end - p.begin); }
  const std::vector<Piece>& pieces() const { return pieces_; }
  std::size_t size() const { return pieces_.size(); }

 private:
  std::string text_;
  std::vector<Piece> pieces_;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Reads every piece of `in` and appends its sub-pieces to `out` (which is not cleared).
  virtual void pre_tokenize(const PieceList& in, PieceList& out) const = 0;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config,
                                                                 const std::string& where);

}  // namespace baton
