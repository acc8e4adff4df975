#include "engine/structured/token_mask.h"

#include <algorithm>
#include <utility>

namespace baton::structured {

TokenMasker::TokenMasker(const std::vector<std::string>& bytes, std::vector<std::int32_t> end_tokens)
    : bytes_(bytes), end_tokens_(std::move(end_tokens)), vocab_size_(bytes.size()) {
  nodes_.emplace_back();
  for (std::size_t id = 0; id < bytes.size(); ++id) {
    if (bytes[id].empty()) continue;
    std::int32_t node = 0;
    for (char c : bytes[id]) {
      const auto b = static_cast<std::uint8_t>(c);
      auto& children = nodes_[static_cast<std::size_t>(node)].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, std::int32_t{-1}));
      if (it == children.end() || it->first != b) {
        const auto fresh = static_cast<std::int32_t>(nodes_.size());
        it = children.insert(it, {b, fresh});
        nodes_.emplace_back();  // invalidates `children`: not used again
      }
      node = it->second;
    }
    nodes_[static_cast<std::size_t>(node)].tokens.push_back(static_cast<std::int32_t>(id));
  }
}

const std::string& TokenMasker::bytes(std::int32_t id) const {
  static const std::string kNone;
  return id >= 0 && static_cast<std::size_t>(id) < bytes_.size() ? bytes_[static_cast<std::size_t>(id)] : kNone;
}

bool TokenMasker::is_end(std::int32_t id) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end();
}

void TokenMasker::allowed(const GrammarMatcher& matcher, std::vector<std::uint8_t>& allowed) const {
  allowed.assign(vocab_size_, 0);
  if (matcher.complete()) {
    for (std::int32_t t : end_tokens_) {
      if (t >= 0 && static_cast<std::size_t>(t) < vocab_size_) allowed[static_cast<std::size_t>(t)] = 1;
    }
  }
  // Depth-first over the trie, one matcher per level of the path.
  struct Frame {
    std::int32_t node;
    std::size_t child;
    GrammarMatcher matcher;
  };
  std::vector<Frame> path;
  path.push_back({0, 0, matcher});
  while (!path.empty()) {
    Frame& f = path.back();
    const Node& node = nodes_[static_cast<std::size_t>(f.node)];
    if (f.child == node.children.size()) {
      path.pop_back();
      continue;
    }
    const auto [byte, next] = node.children[f.child++];
    if (!f.matcher.can_accept(byte)) continue;
    GrammarMatcher advanced = f.matcher;
    if (!advanced.accept(byte)) continue;
    for (std::int32_t t : nodes_[static_cast<std::size_t>(next)].tokens) allowed[static_cast<std::size_t>(t)] = 1;
    path.push_back({next, 0, std::move(advanced)});
  }
}

}  // namespace baton::structured
