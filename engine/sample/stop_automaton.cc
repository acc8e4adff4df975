#include "engine/sample/stop_automaton.h"


namespace baton {

StopAutomaton::StopAutomaton(const std::vector<std::string>& patterns) {
  root_.fill(-1);
  std::size_t total = 1;
  for (const std::string& p : patterns) total += p.size();
  nodes_.reserve(total);
  nodes_.emplace_back();
  sizes_.reserve(patterns.size());
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    const std::string& p = patterns[i];
    sizes_.push_back(p.size());
    if (p.empty()) continue;
    std::int32_t node = 0;
    for (const char c : p) {
      const auto b = static_cast<unsigned char>(c);
      const std::int32_t next = child(node, b);
      node = next >= 0 ? next : add_child(node, b);
    }
    // The first listed wins among equal strings.
    if (nodes_[static_cast<std::size_t>(node)].longest_output < 0) {
      nodes_[static_cast<std::size_t>(node)].longest_output = static_cast<std::int32_t>(i);
    }
  }
  // Breadth first: a node's fail target is shallower, so it is complete before the node.
  std::vector<std::int32_t> queue;
  queue.reserve(nodes_.size());
  for (std::int32_t c = nodes_[0].first_child; c >= 0; c = nodes_[static_cast<std::size_t>(c)].next_sibling) {
    queue.push_back(c);
  }
  nodes_[0].held = 0;
  for (std::size_t head = 0; head < queue.size(); ++head) {
    const std::int32_t n = queue[head];
    Node& node = nodes_[static_cast<std::size_t>(n)];
    const Node& fail = nodes_[static_cast<std::size_t>(node.fail)];
    // Its own pattern is the longest suffix that is a pattern; else the fail target's.
    if (node.longest_output < 0) node.longest_output = fail.longest_output;
    node.held = node.first_child >= 0 ? node.depth : fail.held;
    for (std::int32_t c = node.first_child; c >= 0; c = nodes_[static_cast<std::size_t>(c)].next_sibling) {
      const unsigned char b = nodes_[static_cast<std::size_t>(c)].byte;
      std::int32_t f = node.fail;
      std::int32_t target = -1;
      for (;;) {
        target = child(f, b);
        if (target >= 0 || f == 0) break;
        f = nodes_[static_cast<std::size_t>(f)].fail;
      }
      nodes_[static_cast<std::size_t>(c)].fail = target >= 0 && target != c ? target : 0;
      queue.push_back(c);
    }
  }
}

std::int32_t StopAutomaton::child(std::int32_t node, unsigned char byte) const {
  if (node == 0) return root_[byte];
  for (std::int32_t c = nodes_[static_cast<std::size_t>(node)].first_child; c >= 0;
       c = nodes_[static_cast<std::size_t>(c)].next_sibling) {
    if (nodes_[static_cast<std::size_t>(c)].byte == byte) return c;
  }
  return -1;
}

std::int32_t StopAutomaton::add_child(std::int32_t node, unsigned char byte) {
  const auto id = static_cast<std::int32_t>(nodes_.size());
  Node n;
  n.byte = byte;
  n.depth = nodes_[static_cast<std::size_t>(node)].depth + 1;
  n.next_sibling = nodes_[static_cast<std::size_t>(node)].first_child;
  nodes_.push_back(n);
  nodes_[static_cast<std::size_t>(node)].first_child = id;
  if (node == 0) root_[byte] = id;
  return id;
}

void StopAutomaton::feed(unsigned char byte) {
  for (;;) {
    const std::int32_t next = child(state_, byte);
    if (next >= 0) {
      state_ = next;
      return;
    }
    if (state_ == 0) return;
    state_ = nodes_[static_cast<std::size_t>(state_)].fail;
  }
}

}  // namespace baton
