// The n-gram (prompt lookup) proposer: hand-built sequences pin the rules (ties, ends of context,
// caps); random growing sequences compare it against the rule written the obvious way.
#include "engine/spec/ngram_proposer.h"

#include "gtest/gtest.h"
#include "tests/engine/spec/proposer_test_support.h"

namespace baton {
namespace {

using namespace ::baton::testing;  // the helpers these proposer tests share

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

}  // namespace
}  // namespace baton
