// The suffix tree of suffix decoding: counts, path compression, speculation rules, and random
// interleaved growth and removal in any order, all against an obvious-way reference.
#include "engine/spec/suffix_tree.h"

#include "gtest/gtest.h"
#include "tests/engine/spec/proposer_test_support.h"

namespace baton {
namespace {

using namespace ::baton::testing;  // the helpers these proposer tests share

TEST(SuffixTree, CountsAfterInsertions) {
  SuffixTree tree(3);
  const SuffixSeqId s = tree.add_sequence();
  tree.extend(s, Tokens{1, 2, 1});
  tree.extend(s, Tokens{2, 3});
  ASSERT_TRUE(tree.validate().ok()) << tree.validate();
  EXPECT_EQ(tree.count({}), 5);
  EXPECT_EQ(tree.count(Tokens{1}), 2);
  EXPECT_EQ(tree.count(Tokens{2}), 2);
  EXPECT_EQ(tree.count(Tokens{1, 2}), 2);
  EXPECT_EQ(tree.count(Tokens{1, 2, 1}), 1);
  EXPECT_EQ(tree.count(Tokens{1, 2, 3}), 1);
  EXPECT_EQ(tree.count(Tokens{2, 3}), 1);
  EXPECT_EQ(tree.count(Tokens{3}), 1);
  EXPECT_EQ(tree.count(Tokens{1, 2, 1, 2}), 0);  // deeper than max_depth
  EXPECT_EQ(tree.count(Tokens{4}), 0);
  SuffixReference ref(3);
  ref.add({1, 2, 1, 2, 3});
  expect_same_counts(tree, ref, 5);
}

TEST(SuffixTree, RandomInsertionsAndFifoRemovalsMatchTheReference) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int alphabet = 2 + trial % 3;
    const int depth = 1 + static_cast<int>(rng() % 7);
    SuffixTree tree(depth);
    std::vector<std::pair<SuffixSeqId, Tokens>> held;
    SuffixReference ref(depth);
    for (int op = 0; op < 12; ++op) {
      if (!held.empty() && rng() % 3 == 0) {
        tree.remove_sequence(held.front().first);  // FIFO: the oldest
        ref.add(held.front().second, -1);
        held.erase(held.begin());
      } else {
        const Tokens seq = random_tokens(rng, static_cast<int>(rng() % 30), alphabet);
        const SuffixSeqId id = tree.add_sequence();
        // In random chunks: incremental extension must equal one extend of the whole.
        for (std::size_t at = 0; at < seq.size();) {
          const std::size_t n = std::min(seq.size() - at, std::size_t{1} + rng() % 5);
          tree.extend(id, std::span<const std::int32_t>(seq).subspan(at, n));
          at += n;
        }
        held.emplace_back(id, seq);
        ref.add(seq);
      }
      // Speculation first: validate() would refresh most-frequent children left stale by removals.
      for (int q = 0; q < 4; ++q) {
        const Tokens ctx = random_tokens(rng, static_cast<int>(rng() % 8), alphabet);
        expect_same_speculation(tree.speculate(ctx, 6, 2.0f, 0.1f),
                                ref.speculate(ctx, 6, 2.0f, 0.1f, alphabet));
      }
      expect_same_counts(tree, ref, alphabet);
      if (::testing::Test::HasFatalFailure()) return;
      // The compressed tree is canonical: the same as built from scratch from what is held.
      SuffixTree fresh(depth);
      std::int64_t suffixes = 0;
      for (const auto& [id, seq] : held) {
        fresh.extend(fresh.add_sequence(), seq);
        suffixes += static_cast<std::int64_t>(seq.size());
      }
      EXPECT_EQ(tree.num_nodes(), fresh.num_nodes());
      EXPECT_LE(tree.num_nodes(), 1 + 2 * suffixes + depth * static_cast<std::int64_t>(held.size()));
    }
    while (!held.empty()) {
      tree.remove_sequence(held.front().first);
      held.erase(held.begin());
    }
    EXPECT_EQ(tree.num_nodes(), 1);
    EXPECT_EQ(tree.count({}), 0);
    EXPECT_TRUE(tree.validate().ok()) << tree.validate();
  }
}

TEST(SuffixTree, PathCompressionKeepsLongSequencesSmall) {
  // 4096 distinct tokens: about one leaf per suffix, not one node per (suffix, depth).
  Tokens seq(4096);
  for (int i = 0; i < 4096; ++i) seq[static_cast<std::size_t>(i)] = i;
  SuffixTree tree(24);
  tree.extend(tree.add_sequence(), seq);
  EXPECT_EQ(tree.num_nodes(), 1 + 4096);
  EXPECT_TRUE(tree.validate().ok()) << tree.validate();
}

TEST(SuffixTree, ProposalLengthAdaptsToMatchLengthAndSpecFactor) {
  SuffixTree tree(16);
  const Tokens ctx{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3};
  tree.extend(tree.add_sequence(), ctx);
  // m = 1 "3": 4 w.p. 1/2; m = 2 "2 3": 4, 5; m = 3 "1 2 3": 4, 5, 6 (each at 1/2); m = 4: no
  // continuation (only the context's own end).
  SuffixSpeculation s = tree.speculate(ctx, 8, 1.0f, 0.1f);
  EXPECT_EQ(s.tokens, (Tokens{4, 5, 6}));
  EXPECT_EQ(s.match_len, 3);
  EXPECT_FLOAT_EQ(s.score, 1.5f);
  // Capped at 2 tokens: m = 2 and m = 3 tie at 1.0; the longer match wins.
  s = tree.speculate(ctx, 2, 1.0f, 0.1f);
  EXPECT_EQ(s.tokens, (Tokens{4, 5}));
  EXPECT_EQ(s.match_len, 3);
  // Factor 2: m = 3 may propose 6 tokens, and the whole continuation "4 5 6 7 8 1" follows.
  s = tree.speculate(ctx, 8, 2.0f, 0.1f);
  EXPECT_EQ(s.tokens, (Tokens{4, 5, 6, 7, 8, 1}));
  EXPECT_EQ(s.match_len, 3);
  // Factor 0.7: m = 3 may propose floor(2.1) = 2 tokens, m = 10 would propose 7 (0.7f is a bit
  // less than 0.7, but means 0.7).
  s = tree.speculate(ctx, 8, 0.7f, 0.1f);
  EXPECT_EQ(s.tokens, (Tokens{4, 5}));
  SuffixTree twice(24);
  const Tokens ten{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  twice.extend(twice.add_sequence(), ten);
  const Tokens query{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(twice.speculate(query, 16, 0.7f, 0.1f).tokens, (Tokens{11, 12, 13, 14, 15, 16, 17}));
  // Factor 0.5: m = 1 proposes nothing (floor 0.5), m = 3 proposes 1 token.
  s = tree.speculate(ctx, 8, 0.5f, 0.1f);
  EXPECT_EQ(s.tokens, (Tokens{4}));
  EXPECT_EQ(s.match_len, 3);
}

TEST(SuffixTree, MinTokenProbCutsThePathAndTiesTakeTheLowestToken) {
  SuffixTree tree(8);
  // After "5": 1 (twice), 2 (once); "5" occurs 4 times (the last has no continuation). The query
  // "9 5" matches only with m = 1.
  tree.extend(tree.add_sequence(), Tokens{5, 1, 5, 2, 5, 1, 5});
  const Tokens query{9, 5};
  SuffixSpeculation s = tree.speculate(query, 1, 1.0f, 0.5f);  // 2/4 = 0.5 is not below 0.5
  EXPECT_EQ(s.tokens, (Tokens{1}));
  EXPECT_FLOAT_EQ(s.score, 0.5f);
  EXPECT_TRUE(tree.speculate(query, 1, 1.0f, 0.51f).tokens.empty());
  // The path stops before the first token below the threshold: "5 1" (1/2), "5 1 5" (1/2 · 2/2),
  // then "5 1 5" continues with 2 once out of 2 → 0.25 < 0.3.
  s = tree.speculate(query, 8, 8.0f, 0.3f);
  EXPECT_EQ(s.tokens, (Tokens{1, 5}));
  EXPECT_FLOAT_EQ(s.score, 1.0f);
  s = tree.speculate(query, 8, 8.0f, 0.2f);
  EXPECT_EQ(s.tokens, (Tokens{1, 5, 2, 5, 1, 5}));

  SuffixTree ties(4);
  const Tokens t{7, 3, 7, 2, 7};
  ties.extend(ties.add_sequence(), t);
  EXPECT_EQ(ties.speculate(t, 1, 1.0f, 0.1f).tokens, (Tokens{2}));  // 3 and 2 both once: 2
}

TEST(SuffixTree, SpeculationMatchesBruteForce) {
  std::mt19937 rng(5);
  const float factors[] = {0.5f, 1.0f, 1.5f, 3.0f};
  const float probs[] = {0.0f, 0.1f, 0.3f, 0.5f};
  for (int trial = 0; trial < 400; ++trial) {
    const int alphabet = 2 + trial % 3;
    const int depth = 1 + static_cast<int>(rng() % 7);
    SuffixTree tree(depth);
    SuffixReference ref(depth);
    const int num_seqs = 1 + static_cast<int>(rng() % 3);
    std::vector<std::pair<SuffixSeqId, Tokens>> seqs;
    for (int i = 0; i < num_seqs; ++i) {
      const Tokens seq = random_tokens(rng, static_cast<int>(rng() % 40), alphabet);
      seqs.emplace_back(tree.add_sequence(), seq);
      tree.extend(seqs.back().first, seq);
      ref.add(seq);
    }
    // Each held sequence as the context, through the active suffixes and through matching.
    for (const auto& [id, seq] : seqs) {
      const float factor = factors[rng() % 4];
      const SuffixSpeculation want = ref.speculate(seq, 4, factor, 0.1f, alphabet);
      expect_same_speculation(tree.speculate_tail(id, 4, factor, 0.1f), want);
      expect_same_speculation(tree.speculate(seq, 4, factor, 0.1f), want);
    }
    for (int q = 0; q < 5; ++q) {
      const Tokens ctx = random_tokens(rng, static_cast<int>(rng() % 10), alphabet);
      const int max_tokens = static_cast<int>(rng() % 7);
      const float factor = factors[rng() % 4];
      const float min_prob = probs[rng() % 4];
      expect_same_speculation(tree.speculate(ctx, max_tokens, factor, min_prob),
                              ref.speculate(ctx, max_tokens, factor, min_prob, alphabet));
      if (::testing::Test::HasFailure()) {
        FAIL() << "trial " << trial << " query " << q;
      }
    }
  }
}

TEST(SuffixTree, RemovingANewerSequenceFirstRepointsItsLabels) {
  // b passes through every node of a last, so their labels point into b; removing b first must
  // leave them pointing into a (validate() fails on a label into a sequence no longer held).
  SuffixTree tree(4);
  const SuffixSeqId a = tree.add_sequence();
  tree.extend(a, Tokens{1, 2, 3});
  const SuffixSeqId b = tree.add_sequence();
  tree.extend(b, Tokens{1, 2, 3, 4});
  tree.remove_sequence(b);
  ASSERT_TRUE(tree.validate().ok()) << tree.validate();
  SuffixReference ref(4);
  ref.add({1, 2, 3});
  expect_same_counts(tree, ref, 5);
  // The labels are used: a keeps growing and speculating from the re-pointed nodes.
  tree.extend(a, Tokens{1, 2});
  ASSERT_TRUE(tree.validate().ok()) << tree.validate();
  EXPECT_EQ(tree.speculate(Tokens{1, 2}, 4, 4.0f, 0.1f).tokens, (Tokens{3, 1, 2}));
  SuffixTree fresh(4);
  fresh.extend(fresh.add_sequence(), Tokens{1, 2, 3, 1, 2});
  EXPECT_EQ(tree.num_nodes(), fresh.num_nodes());
}

// Several sequences growing interleaved in random chunks and removed in random order (ids
// reused), against the naive recount from the live sequences after every operation.
TEST(SuffixTree, InterleavedGrowthAndRemovalInAnyOrderMatchTheReference) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 120; ++trial) {
    const int alphabet = 2 + trial % 3;
    const int depth = 1 + static_cast<int>(rng() % 7);
    SuffixTree tree(depth);
    std::vector<std::pair<SuffixSeqId, Tokens>> held;
    std::int64_t removals = 0;
    for (int op = 0; op < 40; ++op) {
      const unsigned r = rng() % 10;
      if (held.empty() || (r < 2 && held.size() < 6)) {
        held.emplace_back(tree.add_sequence(), Tokens{});
      } else if (r < 8) {
        auto& [id, seq] = held[rng() % held.size()];
        const Tokens chunk = random_tokens(rng, 1 + static_cast<int>(rng() % 6), alphabet);
        tree.extend(id, chunk);
        seq.insert(seq.end(), chunk.begin(), chunk.end());
      } else {
        const std::size_t victim = rng() % held.size();
        tree.remove_sequence(held[victim].first);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
        ++removals;
      }
      SuffixReference ref(depth);
      std::int64_t suffixes = 0;
      SuffixTree fresh(depth);
      for (const auto& [id, seq] : held) {
        ref.add(seq);
        suffixes += static_cast<std::int64_t>(seq.size());
        fresh.extend(fresh.add_sequence(), seq);
        ASSERT_EQ(Tokens(tree.sequence(id).begin(), tree.sequence(id).end()), seq);
      }
      // Speculation first: validate() would refresh most-frequent children left stale by removals.
      for (const auto& [id, seq] : held) {
        expect_same_speculation(tree.speculate_tail(id, 5, 2.0f, 0.1f),
                                ref.speculate(seq, 5, 2.0f, 0.1f, alphabet));
      }
      for (int q = 0; q < 3; ++q) {
        const Tokens ctx = random_tokens(rng, static_cast<int>(rng() % 9), alphabet);
        expect_same_speculation(tree.speculate(ctx, 6, 2.0f, 0.1f),
                                ref.speculate(ctx, 6, 2.0f, 0.1f, alphabet));
      }
      expect_same_counts(tree, ref, alphabet);
      // The compressed tree is canonical: the same as built from scratch from what is held.
      EXPECT_EQ(tree.num_nodes(), fresh.num_nodes());
      EXPECT_EQ(tree.num_sequences(), static_cast<std::int32_t>(held.size()));
      EXPECT_LE(tree.num_nodes(), 1 + 2 * suffixes + depth * static_cast<std::int64_t>(held.size()));
      if (::testing::Test::HasFailure()) FAIL() << "trial " << trial << " op " << op;
    }
    while (!held.empty()) {
      const std::size_t victim = rng() % held.size();
      tree.remove_sequence(held[victim].first);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
      ASSERT_TRUE(tree.validate().ok()) << tree.validate() << " trial " << trial;
    }
    EXPECT_GT(removals, 0);
    EXPECT_EQ(tree.num_nodes(), 1);
    EXPECT_EQ(tree.count({}), 0);
  }
}

// Removing each of many interleaved sequences, newest first and from the middle, on longer
// sequences with long shared runs (long edges, deep paths) than the random alphabet gives.
TEST(SuffixTree, RemovalInAnyOrderKeepsLongSharedEdgesValid) {
  std::mt19937 rng(31);
  const Tokens motif = random_tokens(rng, 40, 50);
  for (int order = 0; order < 3; ++order) {
    SuffixTree tree(16);
    std::vector<std::pair<SuffixSeqId, Tokens>> held;
    for (int i = 0; i < 8; ++i) held.emplace_back(tree.add_sequence(), Tokens{});
    // Round robin: each sequence gets a motif slice or noise, a few tokens at a time.
    for (int step = 0; step < 60; ++step) {
      for (auto& [id, seq] : held) {
        Tokens chunk;
        if (rng() % 3 != 0) {
          const std::size_t at = rng() % 30;
          chunk.assign(motif.begin() + static_cast<std::ptrdiff_t>(at),
                       motif.begin() + static_cast<std::ptrdiff_t>(at + 1 + rng() % 10));
        } else {
          chunk = random_tokens(rng, 1 + static_cast<int>(rng() % 3), 60);
        }
        tree.extend(id, chunk);
        seq.insert(seq.end(), chunk.begin(), chunk.end());
      }
    }
    ASSERT_TRUE(tree.validate().ok()) << tree.validate();
    while (!held.empty()) {
      const std::size_t victim = order == 0 ? held.size() - 1 : order == 1 ? held.size() / 2 : rng() % held.size();
      tree.remove_sequence(held[victim].first);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
      ASSERT_TRUE(tree.validate().ok()) << tree.validate() << " order " << order;
      SuffixTree fresh(16);
      for (const auto& [id, seq] : held) fresh.extend(fresh.add_sequence(), seq);
      EXPECT_EQ(tree.num_nodes(), fresh.num_nodes());
      EXPECT_EQ(tree.count(std::span<const std::int32_t>(motif).first(8)),
                fresh.count(std::span<const std::int32_t>(motif).first(8)));
    }
    EXPECT_EQ(tree.num_nodes(), 1);
  }
}

}  // namespace
}  // namespace baton
