// Helpers shared by the model-free proposer tests (n-gram, suffix tree, suffix proposer): one
// propose() call, random token sequences, and the obvious-way reference of suffix-tree counts and
// speculation that the tree and the proposer are compared against.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "engine/spec/proposer.h"
#include "engine/spec/suffix_tree.h"
#include "gtest/gtest.h"

namespace baton::testing {

using Tokens = std::vector<std::int32_t>;

// One propose() call for one request; the drafts.
inline Tokens propose_one(Proposer& p, RequestKey key, const Tokens& tokens, std::int32_t prompt_len,
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

inline Tokens random_tokens(std::mt19937& rng, int n, int alphabet) {
  std::uniform_int_distribution<int> d(0, alphabet - 1);
  Tokens t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Counts of every path, the obvious way: each (sequence, start) adds 1 to each of its first
// max_depth prefixes.
struct SuffixReference {
  explicit SuffixReference(int max_depth) : depth(max_depth) {}
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

inline void expect_same_speculation(const SuffixSpeculation& got, const SuffixSpeculation& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.score, want.score);
  EXPECT_EQ(got.match_len, want.match_len);
}

// Every path the reference knows (and a few it does not) has the same count in the tree.
inline void expect_same_counts(const SuffixTree& tree, const SuffixReference& ref, int alphabet) {
  ASSERT_TRUE(tree.validate().ok()) << tree.validate();
  EXPECT_EQ(tree.count({}), ref.total);
  for (const auto& [path, c] : ref.counts) {
    ASSERT_EQ(tree.count(path), c) << "path of length " << path.size();
    Tokens longer = path;
    longer.push_back(alphabet);  // a token no sequence holds
    ASSERT_EQ(tree.count(longer), 0);
  }
}

}  // namespace baton::testing
