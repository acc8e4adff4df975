// An Aho–Corasick automaton over a request's stop strings, fed the output text one byte at a
// time: after each byte it knows the longest stop string ending there (its start is then the
// earliest of all matches ending there) and the longest tail of the text that is a proper prefix
// of some stop string (what must be held back from streaming). Each byte costs amortized O(1)
// whatever the number and length of the stop strings, so a request's stop-string work is linear
// in its output plus the stop strings' total size once (StopChecker, stop_checker.h).
//
// Hand-written: the streaming queries (held-back length, earliest start on equal ends) are what
// StopChecker needs and no Debian library offers them; it is one small trie with failure links.
// Must not: keep the text (the caller owns it) or allocate per byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace baton {

class StopAutomaton {
 public:
  // Empty strings are ignored. `patterns` is only read here.
  explicit StopAutomaton(const std::vector<std::string>& patterns);

  // Advances over one byte of text.
  void feed(unsigned char byte);
  // The index (into the constructor's list) of the longest stop string ending at the last byte
  // fed, the first listed among equal ones; -1 when none ends there.
  std::int32_t match() const { return nodes_[state_].longest_output; }
  std::size_t pattern_size(std::int32_t index) const { return sizes_[static_cast<std::size_t>(index)]; }
  // Length of the longest tail of the text fed so far that is a proper prefix of a stop string.
  std::size_t held_back() const { return nodes_[state_].held; }

 private:
  struct Node {
    std::int32_t first_child = -1;
    std::int32_t next_sibling = -1;
    std::int32_t fail = 0;
    std::int32_t longest_output = -1;  // pattern index of the longest stop string that is a suffix
    std::uint32_t depth = 0;
    std::uint32_t held = 0;            // longest suffix (via fail links) that has a child
    unsigned char byte = 0;
  };

  std::int32_t child(std::int32_t node, unsigned char byte) const;
  std::int32_t add_child(std::int32_t node, unsigned char byte);

  std::vector<Node> nodes_;                // 0: the root
  std::array<std::int32_t, 256> root_{};   // the root's children by byte (-1: none)
  std::vector<std::size_t> sizes_;
  std::int32_t state_ = 0;
};

}  // namespace baton
