// SuffixTree: the count-carrying, depth-capped suffix trie that suffix decoding speculates from
// (SuffixDecoding, arXiv 2411.04975). It indexes every suffix of every sequence it holds, each cut
// to its first max_depth tokens; a node's count is the number of those (sequence, start) suffixes
// whose path passes through or ends at it. speculate() matches the tail of a context and follows
// the most frequent continuation.
//
// Representation: a path-compressed trie in a node arena. Each edge is labelled by a slice of one
// held sequence (no token copies). Children are enumerated through sibling links; each node also
// points at its most frequent child, and the children of the root and of nodes with two or more
// children are found through one hash map keyed by (parent, first token). No suffix ever ends
// inside an edge, so every position along an edge has the edge's count, and a node with a single
// child and no suffix ending at it is folded into that child: at most about 2 nodes per inserted
// suffix (plus max_depth per sequence), 56 bytes each plus a map slot for branching children,
// plus 4 bytes per held token.
//
// Costs (D = max_depth): extend() O(D) expected per token (each of the <= D suffixes still shorter
// than D grows by one token; one alone in its leaf, or on a path no other suffix leaves, moves
// without touching the hash map); speculate() O(D² + D·t) hash lookups for t proposed tokens,
// plus, after removals, a one-time scan of the children of a node whose leader lost count;
// remove_sequence() O(n·D) for a sequence of n tokens (+ sorting the nodes it touched).
//
// Removal order (the global cache's FIFO): an edge label points into the sequence that last
// passed through the edge. With sequences extended one after another (each complete before the
// next is added; the local tree's single sequence may grow forever) and removed oldest first, no
// removal strands a label. remove_sequence() of any other sequence whose nodes are shared with
// an older one aborts (checked). Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace baton {

using SuffixSeqId = std::int32_t;

struct SuffixSpeculation {
  std::vector<std::int32_t> tokens;  // the proposed continuation (possibly empty)
  float score = 0.0f;                // sum of the path probabilities of the proposed tokens
  std::int32_t match_len = 0;        // length of the context suffix it continues (0: none)
};

class SuffixTree {
 public:
  explicit SuffixTree(std::int32_t max_depth);  // max_depth >= 1

  std::int32_t max_depth() const { return max_depth_; }

  // A new, empty sequence. Ids of removed sequences are reused.
  SuffixSeqId add_sequence();
  // Appends tokens to a held sequence and inserts the suffixes that grow or start with them.
  void extend(SuffixSeqId seq, std::span<const std::int32_t> tokens);
  // Takes every suffix of the sequence out of the tree (counts drop back, emptied nodes go) and
  // forgets it. See "Removal order" above.
  void remove_sequence(SuffixSeqId seq);
  std::span<const std::int32_t> sequence(SuffixSeqId seq) const;
  std::int32_t num_sequences() const { return num_live_seqs_; }

  // The best continuation of `context`. Pattern = its last min(size, max_depth) tokens. For each
  // match length m = 1, 2, ... while the pattern's length-m suffix is a path of the tree: from
  // there, repeatedly take the child with the highest count (ties: the lowest token id), with
  // path probability prob *= child.count / node.count, stopping before a token whose prob would
  // fall below min_token_prob, at a leaf, or after min(max_tokens, floor(m · max_spec_factor))
  // tokens (with 1e-4 of slack, so that 10 × 0.7f is 7). Score = sum of the probs of the proposed
  // tokens. Returns the highest score over m; equal scores go to the longer match; an empty
  // result has match_len 0. Probabilities are computed in float, as Arctic Inference does (a
  // path probability of exactly 0.1 passes min_token_prob 0.1f). Not thread-safe even though
  // const: it refreshes cached most-frequent children.
  SuffixSpeculation speculate(std::span<const std::int32_t> context, std::int32_t max_tokens,
                              float max_spec_factor, float min_token_prob) const;
  // speculate(sequence(seq), ...), without matching from the root: the tail suffixes shorter
  // than max_depth are the ones extend() keeps, so their nodes are known. O(D·t) instead of
  // O(D² + D·t); the local tree's hot path.
  SuffixSpeculation speculate_tail(SuffixSeqId seq, std::int32_t max_tokens, float max_spec_factor,
                                   float min_token_prob) const;

  // Number of indexed suffixes whose first path.size() tokens equal `path` (0 when path is not
  // in the tree or is longer than max_depth); for the empty path, all indexed suffixes.
  std::int64_t count(std::span<const std::int32_t> path) const;
  std::int32_t num_nodes() const { return num_nodes_; }
  // Checks every structural invariant (labels, counts, most frequent children, compression, the
  // child map); OK or the first violation found. O(size of the tree); for tests.
  absl::Status validate() const;

 private:
  static constexpr std::int32_t kNone = -1;
  static constexpr std::int32_t kStale = -2;  // best_child to recompute on next use

  struct Node {
    std::int64_t count = 0;          // suffixes through or ending at this node; 0 = free slot
    std::int32_t token = 0;          // first token of the edge label
    std::int32_t len = 0;            // edge label length (0 for the root)
    std::int32_t depth = 0;          // tokens from the root to the end of this edge
    std::int32_t parent = kNone;
    std::int32_t first_child = kNone;
    std::int32_t next_sibling = kNone;
    std::int32_t prev_sibling = kNone;
    // Highest count, lowest token on ties; kNone for the root (never needed there). A decrement
    // of the leader only marks it kStale: best_child() rescans on demand, so removals never scan
    // the (possibly thousands of) children of a node once per removed suffix. A cache, hence
    // mutable: speculate() is logically const.
    mutable std::int32_t best_child = kNone;
    std::int32_t num_children = 0;
    SuffixSeqId ref_seq = 0;          // label = sequence(ref_seq)[ref_off, ref_off + len)
    std::int32_t ref_off = 0;
  };

  struct Sequence {
    bool live = false;
    std::vector<std::int32_t> tokens;
    // Node where each suffix shorter than max_depth ends, oldest start first.
    std::vector<std::int32_t> active;
  };

  static std::uint64_t child_key(std::int32_t parent, std::int32_t token) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(parent)) << 32) |
           static_cast<std::uint32_t>(token);
  }
  std::int32_t find_child(std::int32_t parent, std::int32_t token) const;
  std::int32_t label_token(const Node& n, std::int32_t i) const {
    return seqs_[static_cast<std::size_t>(n.ref_seq)].tokens[static_cast<std::size_t>(n.ref_off + i)];
  }
  Node& node(std::int32_t id) { return nodes_[static_cast<std::size_t>(id)]; }
  const Node& node(std::int32_t id) const { return nodes_[static_cast<std::size_t>(id)]; }

  std::int32_t new_node();
  void free_node(std::int32_t id);
  // Whether parent's children are in children_ (the root's always; others' from two on).
  bool mapped(std::int32_t parent) const { return parent == 0 || node(parent).num_children >= 2; }
  void add_child(std::int32_t parent, std::int32_t child);
  void remove_child(std::int32_t child);
  // `replacement` (unlinked, same first token) takes `child`'s place under its parent.
  void replace_child(std::int32_t child, std::int32_t replacement);
  bool better(std::int32_t a, std::int32_t b) const;  // a is a more frequent child than b
  void on_count_up(std::int32_t id);
  std::int32_t best_child(std::int32_t id) const;  // kNone when id has no children
  // Moves the suffix of `seq` ending at node `at` one token on (the token at position `pos`);
  // returns the node where it now ends.
  std::int32_t step(SuffixSeqId seq, std::int32_t at, std::int32_t pos);
  void maybe_merge(std::int32_t id);

  // Where a path ends: the node whose edge holds its last token, and how many tokens of that edge
  // it covers (1..len). {kNone, 0} when the path is not in the tree.
  struct Position {
    std::int32_t node = kNone;
    std::int32_t offset = 0;
  };
  Position match(std::span<const std::int32_t> path) const;
  void follow(Position at, std::int32_t max_tokens, float min_token_prob,
              SuffixSpeculation* out) const;
  // Follows from `at` (the end of a match of length m) into *candidate and keeps it in *best
  // when it scores at least as well.
  void consider(Position at, std::int32_t m, std::int32_t max_tokens, float max_spec_factor,
                float min_token_prob, SuffixSpeculation* candidate, SuffixSpeculation* best) const;

  std::int32_t max_depth_;
  std::vector<Node> nodes_;  // [0] is the root
  std::vector<std::int32_t> free_nodes_;
  std::int32_t num_nodes_ = 1;
  absl::flat_hash_map<std::uint64_t, std::int32_t> children_;  // child_key(parent, token) -> child,
                                                               // for mapped() parents only
  std::vector<Sequence> seqs_;
  std::vector<SuffixSeqId> free_seqs_;
  std::int32_t num_live_seqs_ = 0;
};

}  // namespace baton
