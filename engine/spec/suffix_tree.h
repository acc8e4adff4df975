// SuffixTree: the count-carrying, depth-capped suffix trie that suffix decoding speculates from
// (SuffixDecoding, arXiv 2411.04975). It indexes every suffix of every sequence it holds, each cut
// to its first max_depth tokens; a node's count is the number of those (sequence, start) suffixes
// whose path passes through or ends at it. speculate() matches the tail of a context and follows
// the most frequent continuation. Sequences may grow interleaved (several responses being
// generated at once) and be removed in any order.
//
// Representation: a path-compressed trie in a node arena. Each edge is labelled by a slice of one
// held sequence (no token copies) that spells the whole path to the edge's end. Children are
// enumerated through sibling links; each node also points at its most frequent child, and the
// children of the root and of nodes with two or more children are found through one hash map
// keyed by (parent, first token). No suffix ever ends inside an edge, so every position along an
// edge has the edge's count, and a node with a single child and no suffix ending at it is folded
// into that child. Each node lists the suffixes that end at it (an intrusive doubly linked list
// threaded through per-sequence, per-start links).
//
// Removal: a label may point into any held sequence, so removing one must not strand the labels
// that point into it. The removal walk already visits every node a label from the removed
// sequence can be on (such a label spells a path that occurs in it, so one of its suffixes runs
// through the node); after it, each surviving such node, deepest first, is re-pointed at a suffix
// that still ends at it or, if none does, at its first child's label (already re-pointed: it is
// deeper), which spells the node's path too. The end lists exist for this: leaves, where nothing
// can be borrowed from below, always have a suffix ending at them (Arctic Inference's tree keeps
// per-node endpoint maps for the same purpose). Rejected alternative: keeping a removed
// sequence's tokens alive while labels reference it — one surviving short label would pin an
// arbitrarily long sequence, so memory would no longer be bounded by what is held. Labels follow
// the newest sequence through them, so under the proposer's usual oldest-first eviction few
// labels need re-pointing.
//
// Memory: at most about 2 nodes per inserted suffix (plus max_depth per sequence), 64 bytes each
// plus a map slot for branching children, plus 20 bytes per held token (the token and its suffix's
// two end links).
//
// Costs (D = max_depth): extend() O(D) expected per token (each of the <= D suffixes still shorter
// than D grows by one token and moves its end link; one alone in its leaf, or on a path no other
// suffix leaves, moves without touching the hash map); speculate() O(D² + D·t) hash lookups for t
// proposed tokens, plus, after removals, a one-time scan of the children of a node whose leader
// lost count; remove_sequence() O(n·D) for a sequence of n tokens (+ sorting the nodes it
// touched; re-pointing a label is O(1)), in any order. Not thread-safe.
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
  // Takes every suffix of the sequence out of the tree (counts drop back, emptied nodes go, labels
  // that pointed into it are re-pointed) and forgets it. Any held sequence, in any order.
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
  // Checks every structural invariant (labels point into held sequences and spell their paths;
  // each held suffix ends at exactly one node, at its full capped length, and each count equals
  // the suffixes ending at or below the node; most frequent children, compression, the child map,
  // the active suffixes); OK or the first violation found. O(size of the tree + held tokens · D);
  // for tests.
  absl::Status validate() const;

 private:
  static constexpr std::int32_t kNone = -1;
  static constexpr std::int32_t kStale = -2;  // best_child to recompute on next use
  static constexpr std::int64_t kNoEnd = -1;

  // A suffix (sequence, start) as one value, for the end lists.
  static std::int64_t end_handle(SuffixSeqId seq, std::int32_t start) {
    return (static_cast<std::int64_t>(seq) << 32) | static_cast<std::uint32_t>(start);
  }
  static SuffixSeqId end_seq(std::int64_t end) { return static_cast<SuffixSeqId>(end >> 32); }
  static std::int32_t end_start(std::int64_t end) {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(end));
  }

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
    std::int64_t ends = kNoEnd;       // first suffix (end_handle) ending here; kNoEnd for none
  };
  static_assert(sizeof(Node) == 64, "Node is documented (and budgeted) as one cache line");

  struct EndLink {  // neighbours of a suffix in the end list of the node where it ends
    std::int64_t prev = kNoEnd;
    std::int64_t next = kNoEnd;
  };

  struct Sequence {
    bool live = false;
    std::vector<std::int32_t> tokens;
    // Node where each suffix shorter than max_depth ends, oldest start first: the suffixes that
    // start at the last active.size() positions.
    std::vector<std::int32_t> active;
    std::vector<EndLink> ends;  // [tokens.size()]: by start
  };

  static std::uint64_t child_key(std::int32_t parent, std::int32_t token) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(parent)) << 32) |
           static_cast<std::uint32_t>(token);
  }
  std::int32_t find_child(std::int32_t parent, std::int32_t token) const;
  std::int32_t label_token(const Node& n, std::int32_t i) const {
    return seqs_[static_cast<std::size_t>(n.ref_seq)].tokens[static_cast<std::size_t>(n.ref_off + i)];
  }
  EndLink& end_link(std::int64_t end) {
    return seqs_[static_cast<std::size_t>(end_seq(end))].ends[static_cast<std::size_t>(end_start(end))];
  }
  const EndLink& end_link(std::int64_t end) const {
    return seqs_[static_cast<std::size_t>(end_seq(end))].ends[static_cast<std::size_t>(end_start(end))];
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
  // Moves the suffix of `seq` that starts at `start` and ends at node `at` one token on (the
  // token at position `pos`), end link included; returns the node where it now ends.
  std::int32_t step(SuffixSeqId seq, std::int32_t at, std::int32_t pos, std::int32_t start);
  void link_end(std::int32_t id, std::int64_t end);    // `end` now ends at node id
  void unlink_end(std::int32_t id, std::int64_t end);  // `end` no longer ends at node id
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
