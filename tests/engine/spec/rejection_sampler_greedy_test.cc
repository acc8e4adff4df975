// Draft verification (token-wise rejection sampling and block verification): greedy and
// degenerate cases by hand. The shared cases: verify_reference.h.
#include "engine/spec/rejection_sampler.h"

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/spec/verify_reference.h"

namespace baton {
namespace {

using namespace ::baton::verify_test;

// ---------------------------------------------------------------------------------------------
// Greedy

Case one_hot_rows(std::int32_t vocab, std::vector<std::int32_t> argmaxes, std::vector<std::int32_t> drafts) {
  Case c;
  c.vocab = vocab;
  c.drafts = std::move(drafts);
  c.greedy = true;
  c.target.assign(argmaxes.size() * static_cast<std::size_t>(vocab), 0.0f);
  for (std::size_t i = 0; i < argmaxes.size(); ++i) c.target[i * c.v() + static_cast<std::size_t>(argmaxes[i])] = 1.0f;
  return c;
}

// Both functions, whatever the randomness.
void expect_greedy(const Case& c, std::int32_t accepted, std::int32_t next) {
  for (const Verify& verify : {Verify(verify_standard), Verify(verify_block)}) {
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      const VerifyResult r = verify(c.input(), VerifyRandomness{seed, static_cast<std::int64_t>(seed * 3)});
      EXPECT_EQ(r.num_accepted, accepted);
      EXPECT_EQ(r.next_token, next);
    }
  }
}

TEST(GreedyVerify, StopsAtFirstMismatchWithTheArgmax) {
  expect_greedy(one_hot_rows(5, {2, 4, 1, 0}, {2, 3, 1}), 1, 4);
  expect_greedy(one_hot_rows(5, {2, 4, 1, 0}, {0, 4, 1}), 0, 2);
}

TEST(GreedyVerify, AllMatchEmitsTheBonusArgmax) { expect_greedy(one_hot_rows(5, {2, 4, 1, 0}, {2, 4, 1}), 3, 0); }

TEST(GreedyVerify, NoDraftsEmitsTheArgmax) { expect_greedy(one_hot_rows(5, {3}, {}), 0, 3); }

TEST(GreedyVerify, TiesGoToTheLowestIdAndDraftProbsAreIgnored) {
  Case c;
  c.vocab = 4;
  c.greedy = true;
  c.target = {0.1f, 0.4f, 0.4f, 0.1f,  // tie 1 / 2: argmax 1
              0.3f, 0.2f, 0.2f, 0.3f,  // tie 0 / 3: argmax 0
              0.25f, 0.25f, 0.25f, 0.25f};
  c.drafts = {1, 0};
  c.draft = {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};  // would reject everything if used
  expect_greedy(c, 2, 0);
  c.drafts = {2, 0};
  expect_greedy(c, 0, 1);
  c.drafts = {1, 3};
  expect_greedy(c, 1, 0);
}

// ---------------------------------------------------------------------------------------------
// Degenerate rows: no NaN, the documented fallbacks

// Over many seeds, every outcome of both functions satisfies `check`.
void for_many_seeds(const Case& c, const std::function<void(const VerifyResult&)>& check) {
  for (const Verify& verify : {Verify(verify_standard), Verify(verify_block)}) {
    for (std::uint64_t seed = 0; seed < 2000; ++seed) check(verify(c.input(), VerifyRandomness{seed, 5}));
  }
}

TEST(DegenerateVerify, CertainDraftsAreAlwaysAccepted) {
  Case c;
  c.vocab = 3;
  c.drafts = {1, 2};
  c.target = {0, 1, 0, 0, 0, 1, 0.5f, 0, 0.5f};
  for_many_seeds(c, [](const VerifyResult& r) {  // one-hot drafts
    ASSERT_EQ(r.num_accepted, 2);
    ASSERT_NE(r.next_token, 1);
  });
  c.draft = {0.2f, 0.5f, 0.3f, 0.1f, 0.1f, 0.8f};  // p(x) = 1 >= q(x)
  for_many_seeds(c, [](const VerifyResult& r) { ASSERT_EQ(r.num_accepted, 2); });
}

TEST(DegenerateVerify, ImpossibleDraftsAreRejectedAndCorrectedFromTheTarget) {
  Case c;
  c.vocab = 4;
  c.drafts = {3};
  c.target = {0.5f, 0.0f, 0.5f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f};  // p(3) = 0
  for_many_seeds(c, [](const VerifyResult& r) {  // one-hot: the residual is p itself
    ASSERT_EQ(r.num_accepted, 0);
    ASSERT_TRUE(r.next_token == 0 || r.next_token == 2) << r.next_token;
  });
  c.draft = {0.2f, 0.3f, 0.1f, 0.4f};
  for_many_seeds(c, [](const VerifyResult& r) {
    ASSERT_EQ(r.num_accepted, 0);
    ASSERT_TRUE(r.next_token == 0 || r.next_token == 2) << r.next_token;  // max(p - q, 0) support
  });
}

TEST(DegenerateVerify, ZeroResidualFallsBackToTheTargetRow) {
  // q(x) = 0 at the draft: always rejected, and with q = p the residual max(p - q, 0) is 0.
  Case c;
  c.vocab = 4;
  c.drafts = {3, 0};
  c.target = {0.5f, 0.0f, 0.5f, 0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.25f, 0.25f, 0.25f, 0.25f};
  c.draft = {0.5f, 0.0f, 0.5f, 0.0f, 0.1f, 0.2f, 0.3f, 0.4f};
  std::array<int, 4> seen{};
  for_many_seeds(c, [&](const VerifyResult& r) {
    ASSERT_EQ(r.num_accepted, 0);
    ASSERT_TRUE(r.next_token == 0 || r.next_token == 2) << r.next_token;
    ++seen[static_cast<std::size_t>(r.next_token)];
  });
  EXPECT_GT(seen[0], 1500);
  EXPECT_GT(seen[2], 1500);
  // The second draft is outside q: block verification's p_2 = 0 (h_1 = 1, h_2 = 0); both stop at
  // 1 and correct from max(p - q, 0) = {0.1, 0, 0, 0} (block: scaled by p_1 = 1).
  c.drafts = {0, 0};
  c.draft = {0.5f, 0.0f, 0.5f, 0.0f, 0.0f, 0.2f, 0.3f, 0.5f};
  for_many_seeds(c, [](const VerifyResult& r) {
    ASSERT_EQ(r.num_accepted, 1);
    ASSERT_EQ(r.next_token, 0);
  });
}

TEST(DegenerateVerify, EqualRowsAcceptEverything) {
  Case c;
  c.vocab = 3;
  c.drafts = {0, 2, 1};
  c.target = {0.2f, 0.3f, 0.5f, 0.6f, 0.1f, 0.3f, 0.1f, 0.8f, 0.1f, 0.3f, 0.3f, 0.4f};
  c.draft.assign(c.target.begin(), c.target.begin() + 9);
  for_many_seeds(c, [](const VerifyResult& r) { ASSERT_EQ(r.num_accepted, 3); });
}

}  // namespace
}  // namespace baton
