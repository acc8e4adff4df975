// TokenMasker: the tokens a GrammarMatcher allows next, over a vocabulary given as each token's
// bytes (what the token adds to the output text). Built once per vocabulary: a trie of the tokens'
// bytes, which a mask walks with the matcher, leaving every branch whose prefix the grammar
// refuses, so a mask costs the allowed tokens' prefixes rather than the whole vocabulary. A token
// with no bytes (a special token) is never allowed; an end token (EOS) is allowed exactly when the
// output so far is a whole sentence.
//
// Must not: hold per-request state (the matcher is the request's), or know tokenizer formats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/structured/grammar.h"

namespace baton::structured {

class TokenMasker {
 public:
  // bytes[id]: token id's bytes; end_tokens: the ids that end the output.
  TokenMasker(const std::vector<std::string>& bytes, std::vector<std::int32_t> end_tokens);

  std::size_t vocab_size() const { return vocab_size_; }
  // Token id's bytes (empty for special tokens and ids outside the vocabulary).
  const std::string& bytes(std::int32_t id) const;
  bool is_end(std::int32_t id) const;
  // allowed[id] = 1 where token id may come next (resized to the vocabulary).
  void allowed(const GrammarMatcher& matcher, std::vector<std::uint8_t>& allowed) const;

 private:
  struct Node {
    std::vector<std::pair<std::uint8_t, std::int32_t>> children;  // byte -> node, sorted by byte
    std::vector<std::int32_t> tokens;                               // tokens whose bytes end here
  };
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;  // nodes_[0]: the root (no bytes)
  std::vector<std::int32_t> end_tokens_;
  std::size_t vocab_size_ = 0;
};

}  // namespace baton::structured
