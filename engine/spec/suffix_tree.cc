#include "engine/spec/suffix_tree.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "common/status.h"

namespace baton {

SuffixTree::SuffixTree(std::int32_t max_depth) : max_depth_(max_depth), nodes_(1) {
  BATON_CHECK(max_depth >= 1, "SuffixTree: max_depth is ", max_depth, ", must be >= 1");
}

SuffixSeqId SuffixTree::add_sequence() {
  SuffixSeqId id;
  if (!free_seqs_.empty()) {
    id = free_seqs_.back();
    free_seqs_.pop_back();
  } else {
    id = static_cast<SuffixSeqId>(seqs_.size());
    seqs_.emplace_back();
  }
  seqs_[static_cast<std::size_t>(id)].live = true;
  ++num_live_seqs_;
  return id;
}

std::span<const std::int32_t> SuffixTree::sequence(SuffixSeqId seq) const {
  BATON_CHECK(seq >= 0 && static_cast<std::size_t>(seq) < seqs_.size() &&
                  seqs_[static_cast<std::size_t>(seq)].live,
              "SuffixTree: sequence ", seq, " is not held");
  return seqs_[static_cast<std::size_t>(seq)].tokens;
}

std::int32_t SuffixTree::find_child(std::int32_t parent, std::int32_t token) const {
  // Most walks follow the only child or the most frequent one: no hash lookup for those.
  const Node& p = node(parent);
  if (!mapped(parent)) {
    return p.first_child != kNone && node(p.first_child).token == token ? p.first_child : kNone;
  }
  if (p.best_child >= 0 && node(p.best_child).token == token) return p.best_child;
  const auto it = children_.find(child_key(parent, token));
  return it == children_.end() ? kNone : it->second;
}

std::int32_t SuffixTree::new_node() {
  ++num_nodes_;
  if (!free_nodes_.empty()) {
    const std::int32_t id = free_nodes_.back();
    free_nodes_.pop_back();
    node(id) = Node{};
    return id;
  }
  nodes_.emplace_back();
  return static_cast<std::int32_t>(nodes_.size() - 1);
}

void SuffixTree::free_node(std::int32_t id) {
  node(id) = Node{};  // count 0 marks the slot free
  free_nodes_.push_back(id);
  --num_nodes_;
}

// Puts `child` first in parent's sibling list (and in the map when the parent branches).
void SuffixTree::add_child(std::int32_t parent, std::int32_t child) {
  Node& p = node(parent);
  Node& c = node(child);
  c.parent = parent;
  c.prev_sibling = kNone;
  c.next_sibling = p.first_child;
  if (p.first_child != kNone) node(p.first_child).prev_sibling = child;
  p.first_child = child;
  ++p.num_children;
  if (parent != 0 && p.num_children == 2) {
    children_[child_key(parent, node(c.next_sibling).token)] = c.next_sibling;  // now branching
  }
  if (mapped(parent)) children_[child_key(parent, c.token)] = child;
}

void SuffixTree::remove_child(std::int32_t child) {
  Node& c = node(child);
  const std::int32_t parent = c.parent;
  Node& p = node(parent);
  if (mapped(parent)) children_.erase(child_key(parent, c.token));
  if (c.prev_sibling != kNone) {
    node(c.prev_sibling).next_sibling = c.next_sibling;
  } else {
    p.first_child = c.next_sibling;
  }
  if (c.next_sibling != kNone) node(c.next_sibling).prev_sibling = c.prev_sibling;
  c.prev_sibling = c.next_sibling = c.parent = kNone;
  --p.num_children;
  if (parent != 0 && p.num_children == 1) children_.erase(child_key(parent, node(p.first_child).token));
}

void SuffixTree::replace_child(std::int32_t child, std::int32_t replacement) {
  Node& c = node(child);
  Node& r = node(replacement);
  const std::int32_t parent = c.parent;
  r.parent = parent;
  r.prev_sibling = c.prev_sibling;
  r.next_sibling = c.next_sibling;
  if (r.prev_sibling != kNone) {
    node(r.prev_sibling).next_sibling = replacement;
  } else {
    node(parent).first_child = replacement;
  }
  if (r.next_sibling != kNone) node(r.next_sibling).prev_sibling = replacement;
  c.prev_sibling = c.next_sibling = c.parent = kNone;
  if (mapped(parent)) children_[child_key(parent, r.token)] = replacement;  // same key as child's
  if (node(parent).best_child == child) node(parent).best_child = replacement;  // kStale stays
}

bool SuffixTree::better(std::int32_t a, std::int32_t b) const {
  const Node& x = node(a);
  const Node& y = node(b);
  return x.count > y.count || (x.count == y.count && x.token < y.token);
}

// A child's count went up (or it is new): it may take the lead among its siblings.
void SuffixTree::on_count_up(std::int32_t id) {
  const std::int32_t parent = node(id).parent;
  if (parent == 0) return;  // speculation never continues from the root
  Node& p = node(parent);
  if (p.best_child == kStale) return;
  if (p.best_child == kNone || (p.best_child != id && better(id, p.best_child))) p.best_child = id;
}

std::int32_t SuffixTree::best_child(std::int32_t id) const {
  const Node& n = node(id);
  if (n.best_child == kStale) {
    std::int32_t best = kNone;
    for (std::int32_t c = n.first_child; c != kNone; c = node(c).next_sibling) {
      if (best == kNone || better(c, best)) best = c;
    }
    n.best_child = best;
  }
  return n.best_child;
}

std::int32_t SuffixTree::step(SuffixSeqId seq, std::int32_t at, std::int32_t pos, std::int32_t start) {
  const std::int32_t token = seqs_[static_cast<std::size_t>(seq)].tokens[static_cast<std::size_t>(pos)];
  {
    Node& v = node(at);
    if (at != 0 && v.count == 1 && v.first_child == kNone) {
      // Only this suffix runs through the leaf, whose label is the sequence's tail: lengthen it.
      BATON_CHECK(v.ref_seq == seq && v.ref_off + v.len == pos, "SuffixTree: leaf ", at,
                  " labelled (", v.ref_seq, ", ", v.ref_off, ", ", v.len,
                  ") does not end where sequence ", seq, " does (", pos, ")");
      ++v.len;
      ++v.depth;
      return at;
    }
    const std::int32_t only = v.first_child;
    if (at != 0 && v.num_children == 1 && node(only).token == token &&
        node(only).count + 1 == v.count && node(only).len > 1) {
      // Only this suffix ends at v and all the others continue into `only` (v's single child,
      // so not in the map) with this token: move the boundary between them one token down
      // instead of splitting `only` and folding v away on the next token.
      Node& c = node(only);
      ++v.len;
      ++v.depth;
      v.ref_seq = seq;
      v.ref_off = pos + 1 - v.len;
      c.token = label_token(c, 1);
      ++c.ref_off;
      --c.len;
      return at;
    }
  }
  std::int32_t next = find_child(at, token);
  if (next == kNone) {
    next = new_node();
    Node& n = node(next);
    n.count = 1;
    n.token = token;
    n.len = 1;
    n.depth = node(at).depth + 1;
    n.ref_seq = seq;
    n.ref_off = pos;
    add_child(at, next);
  } else if (node(next).len == 1) {
    Node& n = node(next);
    ++n.count;
    // Labels follow the newest sequence through them: under FIFO removal, the common case, the
    // sequence removed is then rarely one a surviving label points into (see Removal).
    n.ref_seq = seq;
    n.ref_off = pos;
  } else {
    // The suffix would end inside the edge: split off its first token as a node of its own.
    const std::int32_t old = next;
    next = new_node();
    Node& o = node(old);
    Node& n = node(next);
    n.count = o.count + 1;
    n.token = token;
    n.len = 1;
    n.depth = node(at).depth + 1;
    n.ref_seq = seq;
    n.ref_off = pos;
    replace_child(old, next);
    o.token = label_token(o, 1);
    ++o.ref_off;
    --o.len;
    add_child(next, old);
    n.best_child = old;
  }
  on_count_up(next);
  // The suffix now ends at `next`; moved before maybe_merge, which needs `at` to have no ends.
  const std::int64_t end = end_handle(seq, start);
  if (at != 0) unlink_end(at, end);
  link_end(next, end);
  if (at != 0) maybe_merge(at);
  return next;
}

// A node that one child passes all its suffixes to (none ends at it) is folded into that child,
// which keeps its id: the node is never one where an active suffix ends.
void SuffixTree::maybe_merge(std::int32_t id) {
  if (id == 0) return;
  if (node(id).num_children != 1) return;
  const std::int32_t child = node(id).first_child;
  if (node(child).count != node(id).count) return;
  BATON_CHECK(node(id).ends == kNoEnd, "SuffixTree: node ", id, " has suffixes ending at it but ",
              "passes its whole count to child ", child);
  remove_child(child);
  Node& u = node(id);
  Node& c = node(child);
  // c's label is preceded by u's in c's sequence (every suffix through c runs through u).
  c.token = u.token;
  c.len += u.len;
  c.ref_off -= u.len;
  replace_child(id, child);
  free_node(id);
}

void SuffixTree::extend(SuffixSeqId seq, std::span<const std::int32_t> tokens) {
  Sequence& s = seqs_[static_cast<std::size_t>(seq)];
  BATON_CHECK(s.live, "SuffixTree::extend: sequence ", seq, " is not held");
  // No exact reserve(size + n): callers extend a token or a few at a time, and an exact reserve
  // would reallocate (copy the whole sequence) on every call; push_back grows geometrically.
  for (const std::int32_t t : tokens) {
    s.tokens.push_back(t);
    s.ends.emplace_back();
    const auto pos = static_cast<std::int32_t>(s.tokens.size() - 1);
    ++node(0).count;
    s.active.push_back(0);  // the suffix that starts here, empty so far
    // active[i] is the suffix that starts at first_start + i (the active starts are the last ones).
    const auto first_start = static_cast<std::int32_t>(pos + 1 - static_cast<std::int32_t>(s.active.size()));
    std::size_t kept = 0;
    for (std::size_t i = 0; i < s.active.size(); ++i) {
      const std::int32_t at = step(seq, s.active[i], pos, first_start + static_cast<std::int32_t>(i));
      if (node(at).depth < max_depth_) s.active[kept++] = at;  // at max_depth it is complete
    }
    s.active.resize(kept);
  }
}

void SuffixTree::remove_sequence(SuffixSeqId seq) {
  Sequence& s = seqs_[static_cast<std::size_t>(seq)];
  BATON_CHECK(s.live, "SuffixTree::remove_sequence: sequence ", seq, " is not held");
  const auto n = static_cast<std::int32_t>(s.tokens.size());
  std::vector<std::pair<std::int32_t, std::int32_t>> touched;  // (depth, node) whose count dropped
  for (std::int32_t start = 0; start < n; ++start) {
    const std::int32_t length = std::min(max_depth_, n - start);
    const std::int64_t end = end_handle(seq, start);
    --node(0).count;
    std::int32_t at = 0;
    while (at != kNone && node(at).depth < length) {
      const std::int32_t c = find_child(at, s.tokens[static_cast<std::size_t>(start + node(at).depth)]);
      BATON_CHECK(c != kNone && node(c).depth <= length, "SuffixTree::remove_sequence: suffix ", start,
                  " of sequence ", seq, " is not in the tree");
      if (--node(c).count > 0) {
        if (at != 0 && node(at).best_child == c) node(at).best_child = kStale;
        touched.emplace_back(node(c).depth, c);
        at = c;
        continue;
      }
      // This suffix was the last through c: c and its chain of descendants (this suffix's path,
      // ending where it ends) go. Nothing else can hang below or end in a node whose count
      // reached zero.
      remove_child(c);
      if (at != 0 && node(at).best_child == c) node(at).best_child = kStale;
      for (std::int32_t x = c; x != kNone;) {
        // A single child each (not in the map), all of count 1: the chain of this suffix.
        const std::int32_t below = node(x).first_child;
        BATON_CHECK((below == kNone || (node(below).count == 1 && node(below).next_sibling == kNone)) &&
                        (node(x).ends == kNoEnd || (below == kNone && node(x).ends == end)),
                    "SuffixTree::remove_sequence: counts or ends below emptied node ", x, " are inconsistent");
        free_node(x);
        x = below;
      }
      at = kNone;
    }
    if (at != kNone) unlink_end(at, end);  // it ends at `at` (depth == length)
  }
  // Deepest first: chains of foldable nodes fold bottom-up, and a node's children have their
  // labels re-pointed before it may borrow one.
  std::sort(touched.begin(), touched.end(), std::greater<>());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (const auto& [depth, id] : touched) {
    if (node(id).count == 0) continue;  // freed after being touched
    Node& x = node(id);
    if (x.ref_seq == seq) {
      // Every node labelled from seq is on one of its suffixes' paths, hence touched. Re-point
      // it at another occurrence of its path: a suffix still ending at it, else (none ends here,
      // so a child carries the count on) the label of a child, which already points elsewhere.
      if (x.ends != kNoEnd) {
        x.ref_seq = end_seq(x.ends);
        x.ref_off = end_start(x.ends) + x.depth - x.len;
      } else {
        BATON_CHECK(x.first_child != kNone, "SuffixTree::remove_sequence: node ", id,
                    " keeps count ", x.count, " but has neither ends nor children");
        const Node& c = node(x.first_child);
        x.ref_seq = c.ref_seq;
        x.ref_off = c.ref_off - x.len;
      }
      BATON_CHECK(x.ref_seq != seq, "SuffixTree::remove_sequence: node ", id,
                  " found no other occurrence of its path than in sequence ", seq);
    }
    maybe_merge(id);
  }
  s = Sequence{};
  free_seqs_.push_back(seq);
  --num_live_seqs_;
}

void SuffixTree::link_end(std::int32_t id, std::int64_t end) {
  Node& x = node(id);
  EndLink& l = end_link(end);
  l.prev = kNoEnd;
  l.next = x.ends;
  if (x.ends != kNoEnd) end_link(x.ends).prev = end;
  x.ends = end;
}

void SuffixTree::unlink_end(std::int32_t id, std::int64_t end) {
  EndLink& l = end_link(end);
  if (l.prev != kNoEnd) {
    end_link(l.prev).next = l.next;
  } else {
    BATON_CHECK(node(id).ends == end, "SuffixTree: suffix ", end_start(end), " of sequence ", end_seq(end),
                " does not end at node ", id);
    node(id).ends = l.next;
  }
  if (l.next != kNoEnd) end_link(l.next).prev = l.prev;
  l.prev = l.next = kNoEnd;
}

SuffixTree::Position SuffixTree::match(std::span<const std::int32_t> path) const {
  Position at{0, 0};
  for (const std::int32_t t : path) {
    const Node& n = node(at.node);
    if (at.offset < n.len) {
      if (label_token(n, at.offset) != t) return {};
      ++at.offset;
    } else {
      const std::int32_t c = find_child(at.node, t);
      if (c == kNone) return {};
      at = {c, 1};
    }
  }
  return at;
}

void SuffixTree::follow(Position at, std::int32_t max_tokens, float min_token_prob,
                        SuffixSpeculation* out) const {
  float prob = 1.0f;
  while (static_cast<std::int32_t>(out->tokens.size()) < max_tokens) {
    const Node& n = node(at.node);
    std::int32_t token;
    if (at.offset < n.len) {
      token = label_token(n, at.offset);  // inside an edge: probability 1 (count / same count)
      ++at.offset;
    } else {
      const std::int32_t best = best_child(at.node);
      if (best == kNone) break;
      const Node& c = node(best);
      prob *= static_cast<float>(c.count) / static_cast<float>(n.count);
      token = c.token;
      at = {best, 1};
    }
    if (prob < min_token_prob) break;
    out->tokens.push_back(token);
    out->score += prob;
  }
}

void SuffixTree::consider(Position at, std::int32_t m, std::int32_t max_tokens, float max_spec_factor,
                          float min_token_prob, SuffixSpeculation* candidate,
                          SuffixSpeculation* best) const {
  // The slack takes the float factor as the decimal it was written as (10 × 0.7f gives 7, not 6).
  const auto limit =
      std::min<double>(max_tokens, std::floor(static_cast<double>(m) * max_spec_factor + 1e-4));
  if (limit < 1) return;
  candidate->tokens.clear();
  candidate->score = 0.0f;
  candidate->match_len = m;
  follow(at, static_cast<std::int32_t>(limit), min_token_prob, candidate);
  if (!candidate->tokens.empty() && candidate->score >= best->score) *best = *candidate;
}

SuffixSpeculation SuffixTree::speculate(std::span<const std::int32_t> context, std::int32_t max_tokens,
                                        float max_spec_factor, float min_token_prob) const {
  SuffixSpeculation best;
  SuffixSpeculation candidate;
  const auto pattern_len = static_cast<std::int32_t>(
      std::min<std::size_t>(static_cast<std::size_t>(max_depth_), context.size()));
  const std::span<const std::int32_t> pattern = context.last(static_cast<std::size_t>(pattern_len));
  for (std::int32_t m = 1; m <= pattern_len; ++m) {
    const Position at = match(pattern.last(static_cast<std::size_t>(m)));
    if (at.node == kNone) break;  // longer suffixes contain this one: no match either
    consider(at, m, max_tokens, max_spec_factor, min_token_prob, &candidate, &best);
  }
  return best;
}

SuffixSpeculation SuffixTree::speculate_tail(SuffixSeqId seq, std::int32_t max_tokens,
                                             float max_spec_factor, float min_token_prob) const {
  const Sequence& s = seqs_[static_cast<std::size_t>(seq)];
  BATON_CHECK(s.live, "SuffixTree::speculate_tail: sequence ", seq, " is not held");
  SuffixSpeculation best;
  SuffixSpeculation candidate;
  // active[size - m] ends the suffix of length m, for m = 1 .. min(size, max_depth - 1). The one
  // of length max_depth (if any) ends at a leaf at max_depth: nothing follows it.
  const std::size_t num = s.active.size();
  for (std::size_t m = 1; m <= num; ++m) {
    const std::int32_t id = s.active[num - m];
    BATON_CHECK(node(id).depth == static_cast<std::int32_t>(m), "SuffixTree: active suffix ", m,
                " of sequence ", seq, " ends at depth ", node(id).depth);
    consider({id, node(id).len}, static_cast<std::int32_t>(m), max_tokens, max_spec_factor,
             min_token_prob, &candidate, &best);
  }
  return best;
}

std::int64_t SuffixTree::count(std::span<const std::int32_t> path) const {
  if (static_cast<std::int64_t>(path.size()) > max_depth_) return 0;
  const Position at = match(path);
  return at.node == kNone ? 0 : node(at.node).count;
}

absl::Status SuffixTree::validate() const {
  auto fail = [](auto... parts) { return absl::InternalError(str_cat("SuffixTree: ", parts...)); };
  std::int64_t held = 0;
  // Node where each held suffix ends, as found through the end lists.
  std::vector<std::vector<std::int32_t>> ends_at(seqs_.size());
  for (std::size_t i = 0; i < seqs_.size(); ++i) {
    const Sequence& s = seqs_[i];
    if (!s.live) continue;
    held += static_cast<std::int64_t>(s.tokens.size());
    if (s.ends.size() != s.tokens.size()) return fail("sequence ", i, " has ", s.ends.size(), " end links");
    ends_at[i].assign(s.tokens.size(), kNone);
  }
  if (node(0).count != held) return fail("root count ", node(0).count, " != ", held, " held tokens");
  if (node(0).ends != kNoEnd) return fail("a suffix ends at the root");
  // Depth-first over (node, path to its end).
  std::vector<std::int32_t> path;
  std::vector<std::pair<std::int32_t, std::size_t>> stack{{0, 0}};
  std::int32_t seen = 0;
  std::size_t in_map = 0;
  while (!stack.empty()) {
    const auto [id, parent_path_len] = stack.back();
    stack.pop_back();
    ++seen;
    const Node& n = node(id);
    path.resize(parent_path_len);
    std::int64_t num_ends = 0;
    if (id != 0) {
      const Node& p = node(n.parent);
      if (n.count <= 0 || n.len <= 0 || n.depth != p.depth + n.len || n.depth > max_depth_) {
        return fail("node ", id, " has count ", n.count, ", len ", n.len, ", depth ", n.depth);
      }
      // No label is stranded: it points into a held sequence.
      const bool live = n.ref_seq >= 0 && static_cast<std::size_t>(n.ref_seq) < seqs_.size() &&
                        seqs_[static_cast<std::size_t>(n.ref_seq)].live;
      if (!live || n.ref_off < p.depth ||
          static_cast<std::size_t>(n.ref_off + n.len) >
              seqs_[static_cast<std::size_t>(n.ref_seq)].tokens.size()) {
        return fail("node ", id, " has a bad label (", n.ref_seq, ", ", n.ref_off, ", ", n.len, ")");
      }
      const auto& seq = seqs_[static_cast<std::size_t>(n.ref_seq)].tokens;
      // The label's sequence must spell the whole path there, not just the label.
      if (!std::equal(path.begin(), path.end(), seq.begin() + (n.ref_off - p.depth))) {
        return fail("node ", id, "'s label is not preceded by its path in sequence ", n.ref_seq);
      }
      if (n.token != label_token(n, 0) || find_child(n.parent, n.token) != id) {
        return fail("node ", id, " is not found under its first token");
      }
      if (mapped(n.parent)) {
        const auto it = children_.find(child_key(n.parent, n.token));
        if (it == children_.end() || it->second != id) return fail("node ", id, " is not in the map");
        ++in_map;
      }
      for (std::int32_t i = 0; i < n.len; ++i) path.push_back(label_token(n, i));
      // Each suffix listed here is held, spells this path, and is exactly this deep (its whole
      // length, capped at max_depth): together with the counts below, count == the number of
      // held suffixes through or ending at the node, recounted from the sequences themselves.
      for (std::int64_t e = n.ends, prev = kNoEnd; e != kNoEnd; prev = e, e = end_link(e).next) {
        const SuffixSeqId t = end_seq(e);
        const std::int32_t start = end_start(e);
        if (t < 0 || static_cast<std::size_t>(t) >= seqs_.size() || !seqs_[static_cast<std::size_t>(t)].live ||
            start < 0 || static_cast<std::size_t>(start) >= seqs_[static_cast<std::size_t>(t)].tokens.size()) {
          return fail("node ", id, " lists a suffix (", t, ", ", start, ") that is not held");
        }
        const auto& tokens = seqs_[static_cast<std::size_t>(t)].tokens;
        if (end_link(e).prev != prev) return fail("end links of suffix (", t, ", ", start, ")");
        std::int32_t& where = ends_at[static_cast<std::size_t>(t)][static_cast<std::size_t>(start)];
        if (where != kNone) return fail("suffix (", t, ", ", start, ") ends at nodes ", where, " and ", id);
        where = id;
        const auto length = std::min<std::int64_t>(max_depth_, static_cast<std::int64_t>(tokens.size()) - start);
        if (n.depth != length || !std::equal(path.begin(), path.end(), tokens.begin() + start)) {
          return fail("suffix (", t, ", ", start, ") of length ", length, " does not end at node ", id,
                      " (depth ", n.depth, ")");
        }
        ++num_ends;
      }
    }
    std::int64_t child_sum = 0;
    std::int32_t best = kNone;
    std::int32_t num_children = 0;
    for (std::int32_t c = n.first_child, prev = kNone; c != kNone; prev = c, c = node(c).next_sibling) {
      if (node(c).parent != id || node(c).prev_sibling != prev) return fail("sibling links of ", c);
      child_sum += node(c).count;
      ++num_children;
      if (best == kNone || better(c, best)) best = c;
      stack.emplace_back(c, path.size());
    }
    if (n.count != child_sum + num_ends) {
      return fail("node ", id, " counts ", n.count, ", its children ", child_sum, " and ", num_ends,
                  " suffixes end there");
    }
    if (num_children != n.num_children) {
      return fail("node ", id, " has ", num_children, " children, not ", n.num_children);
    }
    if (id != 0 && best != best_child(id)) {
      return fail("node ", id, " best child ", n.best_child, " != ", best);
    }
    if (id != 0 && num_children == 1 && num_ends == 0) return fail("node ", id, " is foldable");
  }
  if (seen != num_nodes_ || in_map != children_.size()) {
    return fail(seen, " nodes reachable, ", num_nodes_, " counted; ", in_map, " mapped, ",
                children_.size(), " in the map");
  }
  for (std::size_t i = 0; i < seqs_.size(); ++i) {
    const Sequence& s = seqs_[i];
    if (!s.live) continue;
    for (std::size_t start = 0; start < s.tokens.size(); ++start) {
      if (ends_at[i][start] == kNone) return fail("suffix (", i, ", ", start, ") ends nowhere");
    }
    // The active suffixes are the last min(size, max_depth - 1) ones, oldest first.
    const std::size_t num_active = std::min(s.tokens.size(), static_cast<std::size_t>(max_depth_ - 1));
    if (s.active.size() != num_active) {
      return fail("sequence ", i, " has ", s.active.size(), " active suffixes, not ", num_active);
    }
    for (std::size_t k = 0; k < num_active; ++k) {
      const std::size_t start = s.tokens.size() - num_active + k;
      if (s.active[k] != ends_at[i][start]) {
        return fail("sequence ", i, " has its active suffix ", start, " at node ", s.active[k], ", not ",
                    ends_at[i][start]);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
