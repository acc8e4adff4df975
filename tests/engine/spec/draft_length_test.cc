// DraftLengthController (adaptive_draft_length) with made-up costs and verifications: it tries the
// configured length and then none, picks the length with the most tokens per second, keeps one
// disturbed step from moving it but follows a lasting change, probes after long stretches without
// drafts (less often while the probes keep losing), refreshes the stalest length, borrows costs
// across batch sizes, does not flip on near-ties, counts a proposer that rarely drafts or stops
// short, and keeps acceptance per draft position, so that long drafts keep their value while short
// ones run.
#include "engine/spec/draft_length.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

constexpr std::int32_t kMaxK = 4;
constexpr RequestKey kKey = 7;
const std::vector<RequestKey> kOne = {kKey};

// Fills every measurement window of (batch, k) with these costs (microseconds).
void measure(DraftLengthController& c, std::size_t batch, std::int32_t k, double draft_us, double verify_us) {
  for (int i = 0; i < DraftLengthController::kWindow; ++i) {
    c.record_draft_seconds(batch, k, draft_us * 1e-6);
    c.record_verify_seconds(batch, k, verify_us * 1e-6);
  }
}

// Costs that grow with k: verify 100 + per_token * k, draft per_draft * k.
void measure_all(DraftLengthController& c, std::size_t batch, double per_token, double per_draft) {
  for (std::int32_t k = 0; k <= kMaxK; ++k) measure(c, batch, k, per_draft * k, 100.0 + per_token * k);
}

// `times` verifications of `drafted` drafts with `accepted` accepted, each after a proposal that
// drafted them.
void verify(DraftLengthController& c, RequestKey key, std::int32_t drafted, std::int32_t accepted, int times = 40) {
  for (int i = 0; i < times; ++i) {
    c.record_proposal(key, drafted, drafted);
    c.record_verification(key, drafted, accepted);
  }
}

// Verifications of `drafted` drafts with these accepted counts, in this order, `times` over.
void verify_cycle(DraftLengthController& c, RequestKey key, std::int32_t drafted, const std::vector<std::int32_t>& accepted,
                  int times = 10) {
  for (int t = 0; t < times; ++t) {
    for (std::int32_t a : accepted) {
      c.record_proposal(key, drafted, drafted);
      c.record_verification(key, drafted, a);
    }
  }
}

// Of 4 drafts, each accepted half the time once the ones before were: 8 of 16 verifications accept
// none, 4 one, 2 two, 1 three, 1 all four; interleaved, so that each position sees its gains and
// losses alternate.
const std::vector<std::int32_t> kHalfEachPosition = {0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 2, 0, 1, 0, 4};

// What choose() should pick if it had no history of its own: the best tokens per second by the
// controller's own estimates (introspection), ties to the smaller k.
std::int32_t best_by_estimates(const DraftLengthController& c, const std::vector<RequestKey>& keys) {
  std::int32_t best = 0;
  double best_rate = -1.0;
  for (std::int32_t k = 0; k <= kMaxK; ++k) {
    double tokens = 0.0;
    for (RequestKey key : keys) tokens += c.expected_tokens(key, k);
    const double rate = tokens / c.cost(keys.size(), k);
    if (rate > best_rate * (1.0 + 1e-9)) {
      best = k;
      best_rate = rate;
    }
  }
  return best;
}

TEST(DraftLength, FirstTriesTheConfiguredLengthThenNone) {
  DraftLengthController c(kMaxK);
  EXPECT_EQ(c.choose(kOne), kMaxK);
  EXPECT_EQ(c.choose(kOne), kMaxK) << "tried again until a step at that length is measured";
  for (int i = 0; i < DraftLengthController::kFirstTries; ++i) {
    EXPECT_EQ(c.choose(kOne), kMaxK) << "after " << i << " measured steps";
    c.record_verify_seconds(1, kMaxK, 300e-6);
  }
  for (int i = 0; i < DraftLengthController::kFirstTries; ++i) {
    EXPECT_EQ(c.choose(kOne), 0) << "after " << i << " measured steps";
    c.record_verify_seconds(1, 0, 100e-6);
  }
  EXPECT_GE(c.cost(1, 2), 100e-6) << "an unmeasured length costs at least the nearest smaller one";
}

// The first steps' times include a cold start: one slow first plain step must not make drafting
// win (it would stand until the next refresh).
TEST(DraftLength, OneSlowFirstPlainStepDoesNotDecide) {
  DraftLengthController c(kMaxK);
  verify(c, kKey, kMaxK, 0);  // nothing is ever accepted
  while (c.choose(kOne) == kMaxK) c.record_verify_seconds(1, kMaxK, 300e-6);
  c.record_verify_seconds(1, 0, 30000e-6);  // the first plain step, 100x slow
  while (c.choose(kOne) == 0 && c.cost(1, 0) > 1000e-6) c.record_verify_seconds(1, 0, 100e-6);
  EXPECT_NEAR(c.cost(1, 0), 100e-6, 1e-12);
  EXPECT_EQ(c.choose(kOne), 0);
}

TEST(DraftLength, DraftsAllThatIsAcceptedAndNothingThatIsNot) {
  DraftLengthController always(kMaxK);
  measure_all(always, 1, 25.0, 10.0);
  verify(always, kKey, kMaxK, kMaxK);  // every draft accepted
  for (std::int32_t i = 1; i <= kMaxK; ++i) EXPECT_GT(always.acceptance(kKey, i), 0.9) << "position " << i;
  EXPECT_EQ(always.choose(kOne), kMaxK);

  DraftLengthController never(kMaxK);
  measure_all(never, 1, 25.0, 10.0);
  verify(never, kKey, kMaxK, 0);
  EXPECT_LT(never.acceptance(kKey, 1), 0.1);
  EXPECT_EQ(never.choose(kOne), 0);
}

TEST(DraftLength, PicksTheLengthWithTheMostTokensPerSecond) {
  // Half the drafts accepted once the ones before were: about 1, 1.5, 1.75, 1.875, 1.94 tokens
  // for 100, 115, 130, 145, 160 us: two drafts give the most per second.
  DraftLengthController c(kMaxK);
  measure_all(c, 1, 10.0, 5.0);
  verify_cycle(c, kKey, kMaxK, kHalfEachPosition);
  for (std::int32_t i = 1; i <= kMaxK; ++i) EXPECT_NEAR(c.acceptance(kKey, i), 0.5, 0.05) << "position " << i;
  ASSERT_EQ(best_by_estimates(c, kOne), 2);
  EXPECT_EQ(c.choose(kOne), 2);
  // Dearer drafting moves it down; cheaper verification with perfect acceptance, up.
  measure_all(c, 1, 10.0, 60.0);
  ASSERT_EQ(best_by_estimates(c, kOne), 0);
  EXPECT_EQ(c.choose(kOne), 0);
}

TEST(DraftLength, ACostIsTheLowerMedianOfItsLastEightMeasurements) {
  DraftLengthController c(kMaxK);
  for (double us : {10.0, 90.0, 20.0, 80.0, 30.0, 70.0, 40.0, 60.0}) c.record_verify_seconds(1, 0, us * 1e-6);
  EXPECT_NEAR(c.cost(1, 0), 40e-6, 1e-12);  // 10 20 30 [40] 60 70 80 90
  for (double us : {100.0, 110.0}) c.record_verify_seconds(1, 0, us * 1e-6);
  EXPECT_NEAR(c.cost(1, 0), 60e-6, 1e-12);  // 10 and 90 dropped: 20 30 40 [60] 70 80 100 110
  c.record_draft_seconds(1, 0, 5e-6);
  EXPECT_NEAR(c.cost(1, 0), 65e-6, 1e-12) << "drafting and verifying add up";
}

TEST(DraftLength, OneDisturbedStepMovesNothingButALastingChangeDoes) {
  DraftLengthController c(kMaxK);
  measure_all(c, 1, 25.0, 10.0);
  verify(c, kKey, kMaxK, kMaxK);
  ASSERT_EQ(c.choose(kOne), kMaxK);
  // One step at k drafts 100x slower (the machine was busy): a mean would flip to fewer drafts.
  c.record_verify_seconds(1, kMaxK, 20000e-6);
  EXPECT_EQ(c.choose(kOne), kMaxK);
  // Most of the last steps at k are slow: that is the cost now.
  for (int i = 0; i < DraftLengthController::kWindow / 2 + 1; ++i) c.record_verify_seconds(1, kMaxK, 20000e-6);
  EXPECT_LT(c.choose(kOne), kMaxK);
}

TEST(DraftLength, ProbesAfterStretchesWithoutDraftsLessOftenWhileTheyLose) {
  DraftLengthController c(kMaxK);
  measure_all(c, 1, 25.0, 10.0);
  verify(c, kKey, kMaxK, 0);
  std::vector<int> drafted_at;  // choice numbers that asked for drafts
  for (int i = 1; i <= 2000; ++i) {
    if (c.choose(kOne) > 0) drafted_at.push_back(i);
  }
  ASSERT_FALSE(drafted_at.empty());
  EXPECT_EQ(drafted_at.front(), DraftLengthController::kProbeAfter) << "the first probe ends the first streak";
  // Probes and refreshes: a few percent of the steps, never none for long.
  EXPECT_LT(drafted_at.size(), 2000u / 20);
  int longest_gap = 0;
  for (std::size_t i = 1; i < drafted_at.size(); ++i) longest_gap = std::max(longest_gap, drafted_at[i] - drafted_at[i - 1]);
  // (Refreshes at no drafts do not count toward a streak.)
  EXPECT_LE(longest_gap, DraftLengthController::kMaxProbeAfter +
                             DraftLengthController::kMaxProbeAfter / DraftLengthController::kRefreshEvery + 1);
  // A probe that finds acceptance again brings drafting back at once.
  verify(c, kKey, kMaxK, kMaxK);
  EXPECT_EQ(c.choose(kOne), kMaxK);
}

TEST(DraftLength, EveryRefreshRunsTheLengthChosenLongestAgo) {
  DraftLengthController c(kMaxK);
  measure_all(c, 1, 25.0, 10.0);
  verify(c, kKey, kMaxK, kMaxK);  // k always best: the other lengths are never chosen on merit
  std::vector<std::int32_t> refreshed;
  for (int i = 1; i <= 4 * DraftLengthController::kRefreshEvery; ++i) {
    const std::int32_t k = c.choose(kOne);
    if (i % DraftLengthController::kRefreshEvery == 0) {
      refreshed.push_back(k);
    } else {
      EXPECT_EQ(k, kMaxK) << "choice " << i;
    }
  }
  EXPECT_EQ(refreshed, (std::vector<std::int32_t>{0, 1, 2, 3}));
}

TEST(DraftLength, BorrowsCostsFromTheNearestBatchSizeScaledByItsPlainStep) {
  DraftLengthController c(kMaxK);
  measure_all(c, 1, 25.0, 10.0);
  const std::vector<RequestKey> eight = {1, 2, 3, 4, 5, 6, 7, 8};
  for (RequestKey key : eight) verify(c, key, kMaxK, kMaxK);
  // Nothing measured at 8: batch 1's costs decide, no first tries.
  EXPECT_DOUBLE_EQ(c.cost(8, 3), c.cost(1, 3));
  EXPECT_EQ(c.choose(eight), kMaxK);
  // A plain step at 8 costs twice batch 1's: so does every length it has not measured.
  measure(c, 8, 0, 0.0, 200.0);
  EXPECT_NEAR(c.cost(8, 3), 2.0 * c.cost(1, 3), 1e-12);
  EXPECT_DOUBLE_EQ(c.cost(8, 0), 200e-6);
}

TEST(DraftLength, NearTiesKeepTheLastLength) {
  DraftLengthController c(kMaxK);
  verify_cycle(c, kKey, kMaxK, kHalfEachPosition);
  const double t1 = c.expected_tokens(kKey, 1), t2 = c.expected_tokens(kKey, 2);
  // k = 1 clearly best at first.
  measure(c, 1, 0, 0.0, 100.0);
  measure(c, 1, 1, 0.0, 110.0);
  for (std::int32_t k = 2; k <= kMaxK; ++k) measure(c, 1, k, 0.0, 1000.0);
  ASSERT_EQ(c.choose(kOne), 1);
  const double rate1 = t1 / 110e-6;
  // k = 2 ahead by 2%: not enough to switch.
  measure(c, 1, 2, 0.0, t2 / (1.02 * rate1) * 1e6);
  ASSERT_EQ(best_by_estimates(c, kOne), 2);
  EXPECT_EQ(c.choose(kOne), 1);
  // Ahead by 20%: switch.
  measure(c, 1, 2, 0.0, t2 / (1.2 * rate1) * 1e6);
  EXPECT_EQ(c.choose(kOne), 2);
}

TEST(DraftLength, AProposerThatRarelyDraftsIsWorthFewerDrafts) {
  DraftLengthController c(kMaxK);
  measure_all(c, 1, 60.0, 0.0);
  // Every draft it makes is accepted, but it makes drafts on one step in ten (n-gram lookup
  // without matches).
  for (int i = 0; i < 60; ++i) {
    const bool drafts = i % 10 == 0;
    c.record_proposal(kKey, kMaxK, drafts ? kMaxK : 0);
    if (drafts) c.record_verification(kKey, kMaxK, kMaxK);
  }
  EXPECT_LT(c.acceptance(kKey, 1), 0.3) << "a proposal without drafts gains nothing at the first position";
  EXPECT_LT(c.expected_tokens(kKey, kMaxK), 2.0);
  EXPECT_EQ(c.choose(kOne), 0);
  // The same acceptance on every step makes drafting worth it.
  DraftLengthController every(kMaxK);
  measure_all(every, 1, 60.0, 0.0);
  verify(every, kKey, kMaxK, kMaxK, 60);
  EXPECT_EQ(every.choose(kOne), kMaxK);
}

TEST(DraftLength, ANewOrForgottenRequestStartsFromTheEngineWideRate) {
  DraftLengthController c(kMaxK);
  verify(c, 1, kMaxK, kMaxK);
  verify(c, 2, kMaxK, 0);
  const double prior = c.acceptance(99, 1);  // never seen
  EXPECT_GT(prior, c.acceptance(2, 1));
  EXPECT_LT(prior, c.acceptance(1, 1));
  c.forget(1);
  EXPECT_DOUBLE_EQ(c.acceptance(1, 1), prior);
}

// N-gram-like acceptance: the first draft is right about half the time, and once it is, the rest
// nearly always are. Steps at one draft show only the first position; the later positions keep
// what the long drafts showed, so four drafts stay the best length, where one rate fitted to the
// recent steps (0.5: 1.94 tokens for four drafts) would settle on one.
TEST(DraftLength, AcceptancePerPositionKeepsLongDraftsWorthWhileShortOnesRun) {
  DraftLengthController c(kMaxK);
  // 8 of 16 accept none, 1 one, 7 all four: 0.5 at position 1, then 7 of 8, then every one.
  verify_cycle(c, kKey, kMaxK, {0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 1});
  // Then one draft at a time, half of them accepted.
  verify_cycle(c, kKey, 1, {0, 1}, 20);
  EXPECT_NEAR(c.acceptance(kKey, 1), 0.5, 0.05);
  EXPECT_GT(c.acceptance(kKey, 2), 0.75);
  EXPECT_GT(c.acceptance(kKey, 3), 0.95);
  EXPECT_GT(c.acceptance(kKey, 4), 0.95);
  EXPECT_GT(c.expected_tokens(kKey, kMaxK), 2.7);
  // Verify 100 + 20 k us, draft 5 k us: 1, 1.53, 1.97, 2.4, 2.84 tokens for 100 ... 200 us.
  measure_all(c, 1, 20.0, 5.0);
  ASSERT_EQ(best_by_estimates(c, kOne), kMaxK);
  EXPECT_EQ(c.choose(kOne), kMaxK);
}

// A proposer that stops short of the drafts asked for (an n-gram match runs out) gains nothing at
// the next position; a verification of all the drafts asked for says nothing about later positions.
TEST(DraftLength, ADraftThatWasNotMadeGainsNothing) {
  DraftLengthController c(kMaxK);
  for (int i = 0; i < 40; ++i) {
    c.record_proposal(kKey, kMaxK, 2);
    c.record_verification(kKey, 2, 2);
  }
  EXPECT_GT(c.acceptance(kKey, 2), 0.95);
  EXPECT_LT(c.acceptance(kKey, 3), 0.1);
  EXPECT_NEAR(c.expected_tokens(kKey, kMaxK), c.expected_tokens(kKey, 2), 0.2);

  DraftLengthController asked_two(kMaxK);
  verify(asked_two, kKey, kMaxK, kMaxK, 10);  // four of four, a few times
  for (int i = 0; i < 40; ++i) {
    asked_two.record_proposal(kKey, 2, 2);
    asked_two.record_verification(kKey, 2, 2);
  }
  EXPECT_GT(asked_two.acceptance(kKey, 3), 0.9) << "position 3 was never asked for since it was last seen to gain";
}

}  // namespace
}  // namespace baton
