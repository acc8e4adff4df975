// The model-free proposers: n-gram (prompt lookup) and suffix decoding. Hand-built sequences pin
// the rules (ties, ends of context, caps, probabilities, local vs global, FIFO eviction); random
// sequences over small alphabets compare both against brute-force references.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/spec/ngram_proposer.h"
#include "engine/spec/suffix_proposer.h"
#include "engine/spec/suffix_tree.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

using Tokens = std::vector<std::int32_t>;

// One propose() call for one request; the drafts.
Tokens propose_one(Proposer& p, RequestKey key, const Tokens& tokens, std::int32_t prompt_len,
                   std::int32_t max_drafts) {
  Tokens drafts{-7};  // must be cleared
  ProposalRequest req;
  req.key = key;
  req.tokens = tokens;
  req.prompt_len = prompt_len;
  req.max_drafts = max_drafts;
  req.drafts = &drafts;
  const absl::Status s = p.propose(std::span<ProposalRequest>(&req, 1));
  EXPECT_TRUE(s.ok()) << s;
  return drafts;
}

Tokens random_tokens(std::mt19937& rng, int n, int alphabet) {
  std::uniform_int_distribution<int> d(0, alphabet - 1);
  Tokens t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// ---- n-gram ----------------------------------------------------------------------------------

// The rule written the obvious O(L² · max_n) way.
Tokens ngram_reference(const Tokens& t, int min_n, int max_n, int d) {
  const int len = static_cast<int>(t.size());
  for (int n = std::min(max_n, len - 1); n >= min_n; --n) {
    for (int s = 0; s + n <= len - 1; ++s) {
      if (std::equal(t.begin() + s, t.begin() + s + n, t.end() - n)) {
        return Tokens(t.begin() + s + n, t.begin() + std::min(len, s + n + d));
      }
    }
  }
  return {};
}

Tokens ngram(int min_n, int max_n, int k, const Tokens& t, int max_drafts = 100) {
  NgramProposer p(min_n, max_n, k);
  p.add_request(1, std::span<const std::int32_t>(t).first(t.size() / 2));  // half now, half in propose
  return propose_one(p, 1, t, static_cast<std::int32_t>(t.size() / 2), max_drafts);
}

TEST(NgramProposer, TiesTakeTheEarliestOccurrence) {
  // "1 2 3" occurs at 0 (then 9) and at 4 (then 8): the earliest wins.
  EXPECT_EQ(ngram(3, 3, 3, {1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2, 3}), (Tokens{9, 1, 2}));
}

TEST(NgramProposer, LongestMatchWinsOverEarlierShorterOne) {
  // "2 3" occurs first at 0 (then 7), but "1 2 3" occurs at 4 (then 8).
  EXPECT_EQ(ngram(2, 4, 2, {2, 3, 7, 0, 1, 2, 3, 8, 6, 1, 2, 3}), (Tokens{8, 6}));
}

TEST(NgramProposer, MatchNearTheEndProposesFewerThanK) {
  EXPECT_EQ(ngram(2, 2, 5, {7, 8, 9, 7, 8}), (Tokens{9, 7, 8}));
  // Overlapping occurrence ending just before the last position: one token follows it.
  EXPECT_EQ(ngram(2, 2, 5, {4, 4, 4}), (Tokens{4}));
}

TEST(NgramProposer, NoMatchNoDrafts) {
  EXPECT_TRUE(ngram(1, 3, 4, {1, 2, 3, 4, 5}).empty());
  EXPECT_TRUE(ngram(2, 3, 4, {1, 2, 3, 2, 4}).empty());  // "2 4" never occurred; 1-grams too short
}

TEST(NgramProposer, MinLongerThanContextNoDrafts) {
  EXPECT_TRUE(ngram(3, 5, 4, {1, 1}).empty());
  EXPECT_TRUE(ngram(3, 5, 4, {1, 1, 1}).empty());  // needs an occurrence ending before the last
  EXPECT_EQ(ngram(3, 5, 4, {1, 1, 1, 1}), (Tokens{1}));
  EXPECT_TRUE(ngram(1, 1, 4, {}).empty());
  EXPECT_TRUE(ngram(1, 1, 4, {5}).empty());
}

TEST(NgramProposer, MaxNCapsTheMatchLength) {
  // "9 1 2" (n=3) occurs at 3 (then 6); "1 2" (n=2) occurs first at 0 (then 5).
  const Tokens t{1, 2, 5, 9, 1, 2, 6, 3, 9, 1, 2};
  EXPECT_EQ(ngram(2, 2, 1, t), (Tokens{5}));
  EXPECT_EQ(ngram(2, 3, 1, t), (Tokens{6}));
}

TEST(NgramProposer, KAndMaxDraftsCapTheProposal) {
  const Tokens t{1, 2, 3, 4, 5, 6, 7, 1, 2};
  EXPECT_EQ(ngram(2, 2, 3, t), (Tokens{3, 4, 5}));
  EXPECT_EQ(ngram(2, 2, 3, t, 2), (Tokens{3, 4}));
  EXPECT_TRUE(ngram(2, 2, 3, t, 0).empty());
  EXPECT_TRUE(ngram(2, 2, 0, t).empty());
}

TEST(NgramProposer, ErrorsForUnknownOrShrinkingRequestsAndServesTheRest) {
  NgramProposer p(1, 2, 3);
  const Tokens a{1, 2, 3, 1, 2};
  p.add_request(1, a);
  Tokens d0, d1, d2;
  const Tokens shorter{1, 2};
  ProposalRequest reqs[3];
  reqs[0] = {.key = 1, .tokens = a, .prompt_len = 5, .max_drafts = 3, .drafts = &d0};
  reqs[1] = {.key = 2, .tokens = a, .prompt_len = 5, .max_drafts = 3, .drafts = &d1};
  absl::Status s = p.propose(std::span<ProposalRequest>(reqs, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(d0, (Tokens{3, 1, 2}));
  reqs[2] = {.key = 1, .tokens = shorter, .prompt_len = 2, .max_drafts = 3, .drafts = &d2};
  s = p.propose(std::span<ProposalRequest>(&reqs[2], 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  p.remove_request(1, true);
  EXPECT_EQ(p.num_requests(), 0);
  p.remove_request(1, true);  // unknown: ignored
}

TEST(NgramProposer, MatchesBruteForceOnRandomGrowingSequences) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int alphabet = 2 + trial % 4;
    const int min_n = 1 + static_cast<int>(rng() % 4);
    const int max_n = min_n + static_cast<int>(rng() % 4);
    const int k = static_cast<int>(rng() % 6);
    const Tokens all = random_tokens(rng, 1 + static_cast<int>(rng() % 120), alphabet);
    NgramProposer p(min_n, max_n, k);
    std::size_t len = rng() % (all.size() + 1);
    p.add_request(3, std::span<const std::int32_t>(all).first(len));
    while (true) {
      const Tokens ctx(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(len));
      const int max_drafts = static_cast<int>(rng() % 7);
      ASSERT_EQ(propose_one(p, 3, ctx, 0, max_drafts),
                ngram_reference(ctx, min_n, max_n, std::min(k, max_drafts)))
          << "trial " << trial << " len " << len << " n in [" << min_n << ", " << max_n << "]";
      if (len == all.size()) break;
      len = std::min(all.size(), len + 1 + rng() % 4);  // 1..4 accepted tokens per step
    }
  }
}

// ---- suffix tree -----------------------------------------------------------------------------

// Counts of every path, the obvious way: each (sequence, start) adds 1 to each of its first
// max_depth prefixes.
struct Reference {
  explicit Reference(int max_depth) : depth(max_depth) {}
  int depth;
  std::map<Tokens, std::int64_t> counts;
  std::int64_t total = 0;

  void add(const Tokens& seq, int sign = 1) {
    const int n = static_cast<int>(seq.size());
    total += sign * n;
    for (int i = 0; i < n; ++i) {
      for (int len = 1; len <= std::min(depth, n - i); ++len) {
        counts[Tokens(seq.begin() + i, seq.begin() + i + len)] += sign;
      }
    }
    std::erase_if(counts, [](const auto& kv) { return kv.second == 0; });
  }
  std::int64_t count(const Tokens& path) const {
    if (path.empty()) return total;
    const auto it = counts.find(path);
    return it == counts.end() ? 0 : it->second;
  }

  // The speculation rule, enumerating children over the alphabet [0, alphabet).
  SuffixSpeculation speculate(const Tokens& context, int max_tokens, float factor, float min_prob,
                              int alphabet) const {
    SuffixSpeculation best;
    const int pattern_len = std::min(depth, static_cast<int>(context.size()));
    for (int m = 1; m <= pattern_len; ++m) {
      Tokens cur(context.end() - m, context.end());
      if (count(cur) == 0) break;
      const double limit = std::min<double>(max_tokens, std::floor(m * static_cast<double>(factor) + 1e-4));
      SuffixSpeculation cand;
      cand.match_len = m;
      float prob = 1.0f;
      while (static_cast<int>(cand.tokens.size()) < limit && static_cast<int>(cur.size()) < depth) {
        int best_token = -1;
        std::int64_t best_count = 0;
        for (int x = 0; x < alphabet; ++x) {
          Tokens next = cur;
          next.push_back(x);
          const std::int64_t c = count(next);
          if (c > best_count) {  // ascending x: the lowest token wins ties
            best_count = c;
            best_token = x;
          }
        }
        if (best_token < 0) break;
        prob *= static_cast<float>(best_count) / static_cast<float>(count(cur));
        if (prob < min_prob) break;
        cand.tokens.push_back(best_token);
        cand.score += prob;
        cur.push_back(best_token);
      }
      if (!cand.tokens.empty() && cand.score >= best.score) best = cand;
    }
    return best;
  }
};

void expect_same_speculation(const SuffixSpeculation& got, const SuffixSpeculation& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.score, want.score);
  EXPECT_EQ(got.match_len, want.match_len);
}

// Every path the reference knows (and a few it does not) has the same count in the tree.
void expect_same_counts(const SuffixTree& tree, const Reference& ref, int alphabet) {
  ASSERT_TRUE(tree.validate().ok()) << tree.validate();
  EXPECT_EQ(tree.count({}), ref.total);
  for (const auto& [path, c] : ref.counts) {
    ASSERT_EQ(tree.count(path), c) << "path of length " << path.size();
    Tokens longer = path;
    longer.push_back(alphabet);  // a token no sequence holds
    ASSERT_EQ(tree.count(longer), 0);
  }
}


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
  Reference ref(3);
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
    Reference ref(depth);
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
      if (testing::Test::HasFatalFailure()) return;
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
    Reference ref(depth);
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
      if (testing::Test::HasFailure()) {
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
  Reference ref(4);
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
      Reference ref(depth);
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
      if (testing::Test::HasFailure()) FAIL() << "trial " << trial << " op " << op;
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

// ---- suffix proposer -------------------------------------------------------------------------

SuffixProposerConfig suffix_config(int depth, int cached, int k = 16) {
  SuffixProposerConfig c;
  c.max_spec_tokens = k;
  c.max_tree_depth = depth;
  c.max_cached_requests = cached;
  return c;
}

// Adds a request, lets the proposer see prompt + output, and removes it.
void run_request(SuffixProposer& p, RequestKey key, const Tokens& prompt, const Tokens& output,
                 bool finished) {
  p.add_request(key, prompt);
  Tokens all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  propose_one(p, key, all, static_cast<std::int32_t>(prompt.size()), 0);
  p.remove_request(key, finished);
}

TEST(SuffixProposer, GlobalTreeLearnsOnlyFinishedOutputs) {
  SuffixProposer p(suffix_config(8, 10));
  run_request(p, 1, {10, 11, 12}, {1, 2, 3, 4, 5, 6}, /*finished=*/false);
  EXPECT_EQ(p.global_tree().num_sequences(), 0);
  run_request(p, 2, {10, 11, 12}, {1, 2, 3, 4, 5, 6}, /*finished=*/true);
  EXPECT_EQ(p.global_tree().num_sequences(), 1);
  EXPECT_EQ(p.global_tree().count({}), 6);     // the output only
  EXPECT_EQ(p.global_tree().count(Tokens{10}), 0);   // not the prompt
  EXPECT_EQ(p.local_tree(2), nullptr);

  // A new request whose tail "1 2 3" only the global tree can continue.
  p.add_request(3, Tokens{9, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 3, {9, 1, 2, 3}, 4, 8), (Tokens{4, 5, 6}));
}

TEST(SuffixProposer, LocalTreeWinsTiesAndLosesToABetterGlobalProposal) {
  SuffixProposer p(suffix_config(8, 10));
  // Global: "1 2 3" → 4 5 6 once out of twice (0.5 per token, score 1.5).
  run_request(p, 1, {}, {1, 2, 3, 4, 5, 6, 1, 2, 3}, true);
  // Local: "1 2 3" → 7 8 9 once out of twice (the context's own end is the other): also 1.5.
  p.add_request(2, Tokens{1, 2, 3, 7, 8, 9, 0, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 2, {1, 2, 3, 7, 8, 9, 0, 1, 2, 3}, 10, 3), (Tokens{7, 8, 9}));
  // Local: "2 3" → 7 0 at 0.5 each (score 1.0); the global 4 5 6 scores 1.5.
  p.add_request(3, Tokens{2, 3, 7, 0, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 3, {2, 3, 7, 0, 1, 2, 3}, 7, 3), (Tokens{4, 5, 6}));
}

TEST(SuffixProposer, FifoEvictionTakesOutTheOldestOutput) {
  SuffixProposer p(suffix_config(6, 2));
  const Tokens outs[] = {{1, 2, 3, 1, 2}, {2, 3, 4, 2, 3, 1}, {3, 1, 2, 3, 4}};
  run_request(p, 1, {9}, outs[0], true);
  run_request(p, 2, {9}, outs[1], true);
  EXPECT_EQ(p.num_cached_requests(), 2);
  run_request(p, 3, {9}, outs[2], true);
  EXPECT_EQ(p.num_cached_requests(), 2);
  EXPECT_EQ(p.global_tree().num_sequences(), 2);
  // Counts are those of the last two outputs alone, node for node.
  Reference ref(6);
  ref.add(outs[1]);
  ref.add(outs[2]);
  expect_same_counts(p.global_tree(), ref, 10);
  SuffixTree fresh(6);
  fresh.extend(fresh.add_sequence(), outs[1]);
  fresh.extend(fresh.add_sequence(), outs[2]);
  EXPECT_EQ(p.global_tree().num_nodes(), fresh.num_nodes());
}

TEST(SuffixProposer, NoGlobalTreeWhenMaxCachedRequestsIsZero) {
  SuffixProposer p(suffix_config(8, 0));
  run_request(p, 1, {}, {1, 2, 3, 4, 5, 6}, true);
  EXPECT_EQ(p.global_tree().num_sequences(), 0);
  EXPECT_EQ(p.num_cached_requests(), 0);
  p.add_request(2, Tokens{9, 1, 2, 3});
  EXPECT_TRUE(propose_one(p, 2, {9, 1, 2, 3}, 4, 8).empty());
}

TEST(SuffixProposer, RunningRequestsPartialOutputIsProposedFromBeforeItFinishes) {
  SuffixProposer p(suffix_config(8, 10));
  p.add_request(1, Tokens{10, 11, 12});
  propose_one(p, 1, {10, 11, 12, 1, 2, 3, 4, 5, 6}, 3, 0);  // request 1 has produced 1..6
  ASSERT_NE(p.local_tree(1), nullptr);                       // and is still running
  EXPECT_EQ(p.num_cached_requests(), 1);
  EXPECT_EQ(p.global_tree().count({}), 6);        // its output so far
  EXPECT_EQ(p.global_tree().count(Tokens{10}), 0);  // not its prompt

  // Request 2's tail "1 2 3" only request 1's partial output can continue.
  p.add_request(2, Tokens{9, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 2, {9, 1, 2, 3}, 4, 8), (Tokens{4, 5, 6}));
  // Request 1 goes on; request 2 accepted 4 5 6 and is proposed the newest tokens of request 1.
  propose_one(p, 1, {10, 11, 12, 1, 2, 3, 4, 5, 6, 7, 8}, 3, 0);
  EXPECT_EQ(propose_one(p, 2, {9, 1, 2, 3, 4, 5, 6}, 4, 8), (Tokens{7, 8}));
  ASSERT_NE(p.local_tree(1), nullptr);
  EXPECT_TRUE(p.global_tree().validate().ok()) << p.global_tree().validate();
}

TEST(SuffixProposer, CapEvictsTheOldestResponseEvenWhileItsRequestRuns) {
  SuffixProposer p(suffix_config(6, 2));
  p.add_request(1, Tokens{9});
  propose_one(p, 1, {9, 1, 2, 3}, 1, 0);
  p.add_request(2, Tokens{9});
  propose_one(p, 2, {9, 4, 5}, 1, 0);
  EXPECT_EQ(p.num_cached_requests(), 2);
  EXPECT_EQ(p.global_tree().count(Tokens{1, 2, 3}), 1);
  // A third request takes the oldest place: request 1's, though request 1 still runs.
  p.add_request(3, Tokens{9});
  EXPECT_EQ(p.num_cached_requests(), 2);
  EXPECT_EQ(p.global_tree().count(Tokens{1}), 0);
  EXPECT_EQ(p.global_tree().count(Tokens{4, 5}), 1);
  // Request 1 still drafts from both trees, but its new tokens no longer teach the global one.
  EXPECT_EQ(propose_one(p, 1, {9, 1, 2, 3, 4}, 1, 2), (Tokens{5}));  // from request 2's response
  EXPECT_EQ(p.global_tree().count(Tokens{3, 4}), 0);
  p.remove_request(1, /*finished=*/true);
  EXPECT_EQ(p.num_cached_requests(), 2);  // requests 2 and 3
  EXPECT_EQ(p.global_tree().count({}), 2);
  EXPECT_TRUE(p.global_tree().validate().ok()) << p.global_tree().validate();
}

TEST(SuffixProposer, AbortDropsTheResponseAndReAddingIsAReset) {
  SuffixProposer p(suffix_config(8, 10));
  p.add_request(1, Tokens{9});
  propose_one(p, 1, {9, 1, 2, 3}, 1, 0);
  EXPECT_EQ(p.global_tree().count({}), 3);
  p.remove_request(1, /*finished=*/false);
  EXPECT_EQ(p.num_cached_requests(), 0);
  EXPECT_EQ(p.global_tree().num_nodes(), 1);

  // Re-adding a running request (a reset) replaces its response: fed again, counted once.
  p.add_request(2, Tokens{9});
  propose_one(p, 2, {9, 4, 5, 6}, 1, 0);
  p.add_request(2, Tokens{9, 4, 5});
  propose_one(p, 2, {9, 4, 5, 6, 7}, 1, 0);
  EXPECT_EQ(p.num_cached_requests(), 1);
  EXPECT_EQ(p.global_tree().count(Tokens{4, 5, 6, 7}), 1);
  EXPECT_EQ(p.global_tree().count({}), 4);

  // A request that finishes with no output gives its place back.
  p.add_request(3, Tokens{9});
  EXPECT_EQ(p.num_cached_requests(), 2);
  p.remove_request(3, /*finished=*/true);
  EXPECT_EQ(p.num_cached_requests(), 1);
}

TEST(SuffixProposer, NoGlobalTreeWhileRequestsRunWhenMaxCachedRequestsIsZero) {
  SuffixProposer p(suffix_config(8, 0));
  p.add_request(1, Tokens{10});
  p.add_request(2, Tokens{9, 1, 2, 3});
  propose_one(p, 1, {10, 1, 2, 3, 4, 5, 6}, 1, 4);
  EXPECT_EQ(p.num_cached_requests(), 0);
  EXPECT_EQ(p.global_tree().num_sequences(), 0);
  EXPECT_EQ(p.global_tree().num_nodes(), 1);
  EXPECT_TRUE(propose_one(p, 2, {9, 1, 2, 3}, 4, 8).empty());  // request 1's output is not shared
  p.remove_request(1, true);
  EXPECT_EQ(p.global_tree().num_nodes(), 1);
  EXPECT_TRUE(propose_one(p, 2, {9, 1, 2, 3}, 4, 8).empty());
}

// Requests start, grow a few tokens per step interleaved, and finish or abort, against a model of
// the FIFO of cached responses: after every call the global tree holds exactly the model's
// responses (counts node for node; memory bounded by the cap), and every proposal is the brute
// force best of the request's context and the model's responses.
TEST(SuffixProposer, InterleavedRequestsMatchAFifoModelOfTheGlobalCache) {
  std::mt19937 rng(41);
  constexpr int kAlphabet = 4;
  constexpr int kDepth = 5;
  constexpr int kMaxOutput = 30;
  for (int trial = 0; trial < 30; ++trial) {
    const int cap = 1 + trial % 3;
    SuffixProposerConfig config = suffix_config(kDepth, cap, 4);
    SuffixProposer p(config);
    struct Cached {
      RequestKey key;
      Tokens response;
    };
    std::vector<Cached> model;  // oldest first
    struct Running {
      RequestKey key;
      Tokens all;  // prompt + planned output
      std::size_t prompt_len, len;
      bool finishes;
    };
    std::vector<Running> running;
    RequestKey next_key = 1;
    auto find_cached = [&](RequestKey key) {
      return std::find_if(model.begin(), model.end(), [&](const Cached& c) { return c.key == key; });
    };
    auto check = [&] {
      ASSERT_EQ(p.num_cached_requests(), static_cast<std::int32_t>(model.size()));
      ASSERT_LE(p.num_cached_requests(), cap);
      const SuffixTree& g = p.global_tree();
      ASSERT_EQ(g.num_sequences(), static_cast<std::int32_t>(model.size()));
      Reference ref(kDepth);
      SuffixTree fresh(kDepth);
      std::int64_t held = 0;
      for (const Cached& c : model) {
        ref.add(c.response);
        fresh.extend(fresh.add_sequence(), c.response);
        held += static_cast<std::int64_t>(c.response.size());
      }
      expect_same_counts(g, ref, kAlphabet);
      EXPECT_EQ(g.num_nodes(), fresh.num_nodes());
      EXPECT_LE(held, static_cast<std::int64_t>(cap) * kMaxOutput);
      EXPECT_LE(g.num_nodes(), 1 + 2 * held + kDepth * cap);
    };
    while (next_key <= 25 || !running.empty()) {
      if (next_key <= 25 && running.size() < 4 && rng() % 2 == 0) {
        const Tokens prompt = random_tokens(rng, 3, kAlphabet);
        Running r{next_key++, prompt, prompt.size(), prompt.size(), rng() % 5 != 0};
        const Tokens out = random_tokens(rng, static_cast<int>(rng() % (kMaxOutput + 1)), kAlphabet);
        r.all.insert(r.all.end(), out.begin(), out.end());
        p.add_request(r.key, prompt);
        while (static_cast<int>(model.size()) >= cap) model.erase(model.begin());
        model.push_back({r.key, {}});
        running.push_back(std::move(r));
        check();
      }
      if (running.empty()) continue;
      const std::size_t i = rng() % running.size();
      Running& r = running[i];
      if (r.len == r.all.size()) {
        p.remove_request(r.key, r.finishes);
        const auto c = find_cached(r.key);
        if (c != model.end() && (!r.finishes || c->response.empty())) model.erase(c);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        check();
        continue;
      }
      const std::size_t old_len = r.len;
      r.len = std::min(r.all.size(), r.len + 1 + rng() % 3);
      const Tokens ctx(r.all.begin(), r.all.begin() + static_cast<std::ptrdiff_t>(r.len));
      if (const auto c = find_cached(r.key); c != model.end()) {
        c->response.insert(c->response.end(), ctx.begin() + static_cast<std::ptrdiff_t>(old_len), ctx.end());
      }
      const int max_drafts = static_cast<int>(rng() % 5);
      SuffixSpeculation want;
      if (max_drafts > 0) {
        Reference local(kDepth);
        local.add(ctx);
        Reference global(kDepth);
        for (const Cached& c : model) global.add(c.response);
        want = local.speculate(ctx, max_drafts, config.max_spec_factor, config.min_token_prob, kAlphabet);
        const SuffixSpeculation g =
            global.speculate(ctx, max_drafts, config.max_spec_factor, config.min_token_prob, kAlphabet);
        if (g.score > want.score) want = g;
      }
      ASSERT_EQ(propose_one(p, r.key, ctx, static_cast<std::int32_t>(r.prompt_len), max_drafts), want.tokens)
          << "trial " << trial << " request " << r.key;
      check();
      if (testing::Test::HasFailure()) FAIL() << "trial " << trial;
    }
  }
}

TEST(SuffixProposer, IncrementalLocalTreeEqualsOneBuiltFromScratch) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int depth = 2 + trial % 6;
    SuffixProposer p(suffix_config(depth, 0, 5));
    const Tokens all = random_tokens(rng, 60, 3);
    std::size_t len = 10;
    p.add_request(1, std::span<const std::int32_t>(all).first(len));
    while (len < all.size()) {
      len = std::min(all.size(), len + 1 + rng() % 3);
      const Tokens ctx(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(len));
      const Tokens drafts = propose_one(p, 1, ctx, 10, 5);
      SuffixTree fresh(depth);
      fresh.extend(fresh.add_sequence(), ctx);
      const SuffixTree& local = *p.local_tree(1);
      ASSERT_TRUE(local.validate().ok()) << local.validate();
      EXPECT_EQ(local.num_nodes(), fresh.num_nodes());
      Reference ref(depth);
      ref.add(ctx);
      expect_same_counts(local, ref, 3);
      EXPECT_EQ(drafts, fresh.speculate(ctx, 5, 1.0f, 0.1f).tokens);
      expect_same_speculation(local.speculate_tail(0, 5, 1.0f, 0.1f), fresh.speculate(ctx, 5, 1.0f, 0.1f));
      if (testing::Test::HasFailure()) FAIL() << "trial " << trial << " len " << len;
    }
  }
}

TEST(SuffixProposer, BestOfLocalAndGlobalMatchesBruteForce) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const int alphabet = 2 + trial % 3;
    const int depth = 1 + static_cast<int>(rng() % 6);
    const int cached = static_cast<int>(rng() % 3);
    SuffixProposerConfig config = suffix_config(depth, cached, 1 + static_cast<int>(rng() % 6));
    config.max_spec_factor = rng() % 2 ? 1.0f : 2.0f;
    config.min_token_prob = rng() % 2 ? 0.1f : 0.3f;
    SuffixProposer p(config);
    std::vector<Tokens> responses;  // finished, non-empty outputs, oldest first
    for (RequestKey key = 1; key <= 4; ++key) {
      const Tokens out = random_tokens(rng, static_cast<int>(rng() % 20), alphabet);
      const bool done = rng() % 4 != 0;
      run_request(p, key, random_tokens(rng, 3, alphabet), out, done);
      if (done && !out.empty()) responses.push_back(out);
    }
    const Tokens ctx = random_tokens(rng, 12, alphabet);
    p.add_request(99, std::span<const std::int32_t>(ctx).first(4));
    // Request 99's own response takes the newest place and holds its output before it drafts.
    responses.emplace_back(ctx.begin() + 4, ctx.end());
    Reference global(depth);
    for (std::size_t i = responses.size() > static_cast<std::size_t>(cached) ? responses.size() - cached : 0;
         cached > 0 && i < responses.size(); ++i) {
      global.add(responses[i]);
    }
    Reference local(depth);
    local.add(ctx);
    const int max_drafts = static_cast<int>(rng() % 6);
    const int max_tokens = std::min(config.max_spec_tokens, max_drafts);
    SuffixSpeculation want;
    if (max_tokens > 0) {
      want = local.speculate(ctx, max_tokens, config.max_spec_factor, config.min_token_prob, alphabet);
      const SuffixSpeculation g =
          global.speculate(ctx, max_tokens, config.max_spec_factor, config.min_token_prob, alphabet);
      if (g.score > want.score) want = g;
    }
    ASSERT_EQ(propose_one(p, 99, ctx, 4, max_drafts), want.tokens) << "trial " << trial;
  }
}

TEST(SuffixProposer, ErrorsForUnknownKeysAndClearsOutputs) {
  SuffixProposer p(suffix_config(8, 4));
  Tokens drafts{1, 2};
  std::vector<float> probs{0.5f};
  const Tokens t{1, 2, 1};
  ProposalRequest req{.key = 5, .tokens = t, .prompt_len = 3, .max_drafts = 2, .drafts = &drafts,
                      .draft_probs = &probs};
  EXPECT_EQ(p.propose(std::span<ProposalRequest>(&req, 1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(drafts.empty());
  EXPECT_TRUE(probs.empty());
  EXPECT_FALSE(p.has_draft_probs());
  p.add_request(5, t);
  EXPECT_TRUE(p.propose(std::span<ProposalRequest>(&req, 1)).ok());
  EXPECT_EQ(drafts, (Tokens{2}));  // "1" → 2 (1/2), one token for a match of length 1
}

}  // namespace
}  // namespace baton
