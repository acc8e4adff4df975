// Grammar and GrammarMatcher: a context-free grammar over bytes and its incremental recognizer,
// the core of constrained decoding (response_format: JSON, JSON schemas). A token is allowed at a
// position iff the matcher, fed the output so far, still accepts after the token's bytes; the
// matcher is then a function of the output alone, so the same mask comes out in sampling and in
// verification (speculation stays exact for the constrained distribution).
//
// A grammar is rules of alternatives, each a sequence of byte classes (sets of bytes) and rule
// references. GrammarBuilder checks it (every rule defined, no left recursion, bounded size). The
// matcher keeps the set of parse stacks still alive, each a stack of positions in the grammar whose
// top is a byte class (a stack that emptied means the input so far is a whole sentence). Working on
// bytes, not characters, lets a token end inside a UTF-8 sequence, as byte-level BPE tokens do.
//
// Must not: know tokenizers, JSON or requests (json_grammar.h and token_mask.h do); grow without a
// bound (a grammar ambiguous enough to keep more than kMaxStacks stacks alive is refused at the
// byte that would need them).
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::structured {

using ByteSet = std::bitset<256>;

// One symbol of an alternative while a grammar is built.
struct Symbol {
  bool is_rule = false;
  std::int32_t rule = -1;  // is_rule
  ByteSet bytes;           // !is_rule: the bytes it matches
  static Symbol ref(std::int32_t rule) { return Symbol{true, rule, {}}; }
  static Symbol byte(std::uint8_t b);
  // Bytes in [lo, hi].
  static Symbol range(std::uint8_t lo, std::uint8_t hi);
  static Symbol set(const ByteSet& bytes) { return Symbol{false, -1, bytes}; }
};

// The symbols matching exactly `text`, byte by byte.
std::vector<Symbol> literal(std::string_view text);

class Grammar {
 public:
  enum class Kind : std::uint8_t { kBytes, kRule, kEnd };
  struct Element {
    Kind kind = Kind::kEnd;
    std::int32_t value = 0;  // kBytes: index into byte_sets(); kRule: rule id
  };

  std::int32_t root() const { return root_; }
  std::size_t num_rules() const { return alternatives_.size(); }
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  // Where each alternative of `rule` starts in elements() (each ends at a kEnd element).
  const std::vector<std::int32_t>& alternatives(std::int32_t rule) const {
    return alternatives_[static_cast<std::size_t>(rule)];
  }
  const std::string& rule_name(std::int32_t rule) const { return names_[static_cast<std::size_t>(rule)]; }

 private:
  friend class GrammarBuilder;
  std::int32_t root_ = 0;
  std::vector<Element> elements_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<std::int32_t>> alternatives_;
  std::vector<std::string> names_;
};

class GrammarBuilder {
 public:
  static constexpr std::size_t kMaxElements = 1 << 20;

  // A new rule (names are for messages only and need not be unique).
  std::int32_t rule(std::string name);
  void add(std::int32_t rule, std::vector<Symbol> alternative);  // an empty alternative matches ""
  // The grammar starting at `root`; InvalidArgument naming the rule for an undefined rule (no
  // alternatives), a reference to no rule, left recursion, or a grammar over kMaxElements.
  absl::StatusOr<std::shared_ptr<const Grammar>> build(std::int32_t root) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<std::vector<Symbol>>> rules_;
};

class GrammarMatcher {
 public:
  static constexpr std::size_t kMaxStacks = 4096;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Feeds one byte: false (and nothing changes) when no parse can take it.
  bool accept(std::uint8_t byte);
  // Feeds the bytes in order, all or nothing.
  bool accept(std::string_view bytes);
  // Whether some parse takes `byte` next (accept() without the change).
  bool can_accept(std::uint8_t byte) const { return next_bytes_.test(byte); }
  // The bytes some parse takes next.
  const ByteSet& next_bytes() const { return next_bytes_; }
  // The input so far is a whole sentence of the grammar (it may also go on).
  bool complete() const { return complete_; }
  // Complete, and nothing may follow.
  bool finished() const { return complete_ && stacks_.empty(); }
  // False once a byte needed more than kMaxStacks parses (the grammar is too ambiguous): the
  // matcher then accepts nothing more.
  bool ok() const { return ok_; }
  std::size_t num_stacks() const { return stacks_.size(); }

 private:
  using Stack = std::vector<std::int32_t>;  // positions in elements(); back() is the top
  // Adds `stack` to `out` with rule references on top replaced by every alternative (recursively),
  // exhausted alternatives popped; an empty stack sets *complete.
  void expand(Stack stack, std::vector<Stack>& out, bool* complete) const;
  void set_stacks(std::vector<Stack> stacks, bool complete);

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;  // sorted, unique; every top is a kBytes element
  ByteSet next_bytes_;
  bool complete_ = false;
  bool ok_ = true;
};

}  // namespace baton::structured
