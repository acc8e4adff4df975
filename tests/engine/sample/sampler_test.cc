// Sampler basics against plain references: SamplingParams validation, the keyed random streams
// and the inverse-CDF draw, and greedy decoding (argmax, ties, penalties, masks).
#include "engine/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/sample/sampler_reference.h"

namespace baton {
namespace {

using namespace ::baton::sampler_test;

// ---------------------------------------------------------------------------------------------
// SamplingParams::validate

TEST(SamplingParamsValidate, DefaultsAndBoundariesAreValid) {
  EXPECT_TRUE(SamplingParams{}.validate(100).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.max_tokens = 5;
  p.min_tokens = 5;
  p.stop_token_ids = {0, 99};
  p.logprobs = 20;
  p.stop = {"x"};
  EXPECT_TRUE(p.validate(100).ok()) << p.validate(100);
  p.logprobs = 0;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.min_tokens = 0;
  EXPECT_TRUE(p.validate(100).ok());
}

TEST(SamplingParamsValidate, ErrorsNameFieldValueAndRange) {
  struct Bad {
    void (*mutate)(SamplingParams&);
    std::vector<std::string> parts;
  };
  const std::vector<Bad> bad = {
      {[](SamplingParams& p) { p.top_p = 1.5f; }, {"top_p must be in (0, 1], got 1.5"}},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, {"top_p", "(0, 1]", "got 0"}},
      {[](SamplingParams& p) { p.temperature = -0.5f; }, {"temperature", ">= 0", "-0.5"}},
      {[](SamplingParams& p) { p.temperature = std::nanf(""); }, {"temperature", "nan"}},
      {[](SamplingParams& p) { p.temperature = kInf; }, {"temperature", "finite", "inf"}},
      {[](SamplingParams& p) { p.top_k = -2; }, {"top_k", "-1", "-2"}},
      {[](SamplingParams& p) { p.min_p = 1.25f; }, {"min_p", "[0, 1]", "1.25"}},
      {[](SamplingParams& p) { p.min_p = -0.1f; }, {"min_p", "[0, 1]", "-0.1"}},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, {"repetition_penalty", "> 0", "got 0"}},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, {"presence_penalty", "[-2, 2]", "2.5"}},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; }, {"frequency_penalty", "[-2, 2]", "-3"}},
      {[](SamplingParams& p) { p.max_tokens = 0; }, {"max_tokens", ">= 1", "got 0"}},
      {[](SamplingParams& p) { p.min_tokens = 17; }, {"min_tokens", "max_tokens = 16", "17"}},
      {[](SamplingParams& p) { p.min_tokens = -1; }, {"min_tokens", "-1"}},
      {[](SamplingParams& p) { p.stop_token_ids = {3, 100}; }, {"stop_token_ids[1]", "[0, 100)", "100"}},
      {[](SamplingParams& p) { p.stop_token_ids = {-1}; }, {"stop_token_ids[0]", "-1"}},
      {[](SamplingParams& p) { p.logprobs = 21; }, {"logprobs", "20", "got 21"}},
      {[](SamplingParams& p) { p.logprobs = -2; }, {"logprobs", "-2"}},
      {[](SamplingParams& p) { p.stop = {"a", ""}; }, {"stop[1]", "non-empty"}},
      // What one request may make the engine thread do is bounded.
      {[](SamplingParams& p) { p.stop.assign(1025, "x"); }, {"stop has 1025 strings", "at most 1024"}},
      {[](SamplingParams& p) { p.stop = {"a", std::string(1025, 'y')}; }, {"stop[1]", "1025 bytes", "at most 1024"}},
      {[](SamplingParams& p) { p.stop_token_ids.assign(1025, 1); }, {"stop_token_ids", "1025", "at most 1024"}},
      {[](SamplingParams& p) { p.logit_bias = {{3, 1.0f}, {100, 2.0f}}; }, {"logit_bias", "100", "[0, 100)"}},
      {[](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, {"logit_bias", "-1", "negative"}},
      {[](SamplingParams& p) { p.logit_bias = {{4, 100.5f}}; }, {"logit_bias", "token 4", "[-100, 100]", "100.5"}},
      {[](SamplingParams& p) { p.logit_bias = {{4, std::nanf("")}}; }, {"logit_bias", "token 4", "nan"}},
      {[](SamplingParams& p) { p.logit_bias = {{7, 1.0f}, {7, 2.0f}}; }, {"logit_bias", "sorted and unique"}},
      {[](SamplingParams& p) {
         for (std::int32_t t = 0; t < 1025; ++t) p.logit_bias.emplace_back(t, 1.0f);
       },
       {"logit_bias has 1025 tokens", "at most 1024"}},
  };
  for (const Bad& b : bad) {
    SamplingParams p;
    b.mutate(p);
    const absl::Status s = p.validate(100);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.parts[0];
    for (const std::string& part : b.parts) {
      EXPECT_NE(std::string(s.message()).find(part), std::string::npos) << s.message() << " lacks " << part;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// RandomStream and draw

TEST(RandomStream, UniformInHalfOpenUnitIntervalWithMeanOneHalf) {
  RandomStream rng(1, RandomPurpose::kToken, 0);
  double sum = 0.0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GT(u, 0.0);
    ASSERT_LE(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.003);  // sd of the mean is 0.00065
}

TEST(RandomStream, SameSeedSameStreamDifferentSeedDifferentStream) {
  RandomStream a(42, RandomPurpose::kToken, 0), b(42, RandomPurpose::kToken, 0), c(43, RandomPurpose::kToken, 0);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const double ua = a.uniform();
    EXPECT_EQ(ua, b.uniform());
    differ += ua != c.uniform();
  }
  EXPECT_EQ(differ, 100);
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  // Random123's kat_vectors, "philox4x32 10": counter, key -> output.
  using W = std::array<std::uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (W{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (W{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (W{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(RandomStream, IsAPureFunctionOfSeedPurposePositionAndIndex) {
  // Recreating a stream replays it; changing any key component gives other numbers.
  RandomStream a(7, RandomPurpose::kToken, 12);
  std::vector<double> first;
  for (int i = 0; i < 8; ++i) first.push_back(a.uniform());
  RandomStream again(7, RandomPurpose::kToken, 12);
  for (double u : first) EXPECT_EQ(again.uniform(), u);
  EXPECT_EQ(token_stream(7, 12).uniform(), first[0]);
  for (RandomStream other : {RandomStream(8, RandomPurpose::kToken, 12), RandomStream(7, RandomPurpose::kVerify, 12),
                             RandomStream(7, RandomPurpose::kToken, 13),
                             RandomStream(7, RandomPurpose::kToken, 12 + (std::int64_t{1} << 32))}) {
    EXPECT_NE(other.uniform(), first[0]);
  }
  // Streams of neighbouring positions are not shifted copies of each other.
  RandomStream next(7, RandomPurpose::kToken, 13);
  next.uniform();
  EXPECT_NE(next.uniform(), first[0]);
  EXPECT_EQ(a.draws(), 8u);
}

TEST(RandomStream, FirstDrawsOfConsecutivePositionsAreUniformAndUncorrelated) {
  // The engine's plain sampling uses draw 0 of position p, p + 1, ...: those must look independent.
  const int n = 200000;
  double sum = 0.0, lag = 0.0, prev = 0.0;
  for (int p = 0; p < n; ++p) {
    const double u = token_stream(3, p).uniform();
    sum += u;
    if (p > 0) lag += (u - 0.5) * (prev - 0.5);
    prev = u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.003);
  EXPECT_NEAR(lag / (n - 1) * 12.0, 0.0, 0.012);  // lag-1 correlation; sd ~ 1 / sqrt(n) = 0.0022
}

TEST(Draw, IsTheInverseCdfOfU) {
  const std::vector<float> probs = {0.1f, 0.0f, 0.35f, 0.05f, 0.0f, 0.5f};
  RandomStream rng(9, RandomPurpose::kToken, 0), replay(9, RandomPurpose::kToken, 0);
  for (int i = 0; i < 2000; ++i) {
    const double u = replay.uniform();
    double cum = 0.0;
    std::int32_t want = -1;
    for (std::size_t t = 0; t < probs.size() && want < 0; ++t) {
      cum += probs[t];
      if (probs[t] > 0.0f && u <= cum) want = static_cast<std::int32_t>(t);
    }
    if (want < 0) want = 5;
    ASSERT_EQ(Sampler::draw(probs, rng), want) << "u = " << u;
  }
}

TEST(Draw, NeverReturnsZeroProbabilityTokensWhenTheTotalFallsShort) {
  // Sums to 0.75: every u in (0.75, 1] must land on the last positive token, not past it.
  const std::vector<float> probs = {0.0f, 0.5f, 0.0f, 0.25f, 0.0f};
  RandomStream rng(3, RandomPurpose::kToken, 0);
  int ones = 0, threes = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::int32_t t = Sampler::draw(probs, rng);
    ASSERT_TRUE(t == 1 || t == 3) << t;
    (t == 1 ? ones : threes)++;
  }
  EXPECT_NEAR(ones / 20000.0, 0.5, 0.02);
  EXPECT_EQ(Sampler::draw(std::vector<float>{0.0f, 1e-30f, 0.0f}, rng), 1);
}

// ---------------------------------------------------------------------------------------------
// Greedy

TEST(Greedy, ArgmaxWithLowestIdOnTiesAndOneHotTarget) {
  Sampler s;
  Case c{{1.0f, 3.0f, 2.0f, 3.0f, 3.0f, -kInf}, {}, {}, {}, {}};
  c.params.temperature = 0.0f;
  RandomStream rng(0, RandomPurpose::kToken, 0);
  EXPECT_EQ(s.sample(c.logits, c.params, c.history(), c.eos, rng).token, 1);
  EXPECT_EQ(target(s, c), (std::vector<float>{0, 1, 0, 0, 0, 0}));
}

TEST(Greedy, DrawsNoRandomnessAndHonoursTheThreshold) {
  Sampler s;
  Case c{random_logits(50, 5, 2.0f), {}, {}, {}, {}};
  c.params.temperature = 1e-5f;
  RandomStream rng(11, RandomPurpose::kToken, 0), fresh(11, RandomPurpose::kToken, 0);
  for (int i = 0; i < 5; ++i) s.sample(c.logits, c.params, c.history(), c.eos, rng);
  EXPECT_EQ(rng.uniform(), fresh.uniform());
  EXPECT_EQ(count_nonzero(target(s, c)), 1u);
  c.params.temperature = 2e-5f;  // sampled, though nearly one-hot
  expect_matches_reference(s, c, "T = 2e-5");
}

TEST(Greedy, UsesPenalizedLogits) {
  Sampler s;
  Case c{{2.0f, 1.9f, 0.0f}, {}, {}, {0}, {}};
  c.params.temperature = 0.0f;
  RandomStream rng(0, RandomPurpose::kToken, 0);
  EXPECT_EQ(s.sample(c.logits, c.params, c.history(), c.eos, rng).token, 0);
  c.params.repetition_penalty = 1.2f;  // 2 / 1.2 < 1.9
  EXPECT_EQ(s.sample(c.logits, c.params, c.history(), c.eos, rng).token, 1);
}

TEST(LogitBias, IsAddedBeforeEverythingElseInGreedyAndSampledRows) {
  Sampler s;
  Case c{random_logits(64, 9, 2.0f), {}, {}, {}, {}};
  c.output = {5, 5, 9};
  c.params.temperature = 0.0f;
  const auto plain_best = static_cast<std::int32_t>(std::max_element(c.logits.begin(), c.logits.end()) - c.logits.begin());
  EXPECT_FALSE(Sampler::needs_row_processing(c.params, c.output.size()));
  // -100 bans the argmax, +100 forces another token; both make the row the host's to process.
  c.params.logit_bias = {{plain_best, -100.0f}};
  EXPECT_TRUE(Sampler::needs_row_processing(c.params, c.output.size()));
  EXPECT_NE(s.greedy_token(c.logits, c.params, c.history(), c.eos), plain_best);
  c.params.logit_bias = {{3, 100.0f}, {plain_best, -100.0f}};
  EXPECT_EQ(s.greedy_token(c.logits, c.params, c.history(), c.eos), 3);
  // Sampled rows: the distribution of the biased logits, after penalties that see the bias.
  c.params.logit_bias = {{1, 1.5f}, {5, -0.75f}, {40, 3.0f}};
  c.params.presence_penalty = 0.5f;
  c.params.repetition_penalty = 1.3f;
  for (const float t : {0.7f, 1.0f, 1.6f}) {
    c.params.temperature = t;
    expect_matches_reference(s, c, "logit_bias at T = " + std::to_string(t));
  }
}

TEST(Greedy, TokenMatchesTheReferenceOnRowsWithTiesInfinitiesPenaltiesAndMasks) {
  // greedy_token() reads unprocessed rows in place with a vectorized scan: every vocabulary size
  // (so every tail of the 16-lane passes), ties, -inf, +-0, and rows that do need processing.
  Sampler s;
  std::mt19937 gen(5);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t vocab = trial < 2900 ? 1 + static_cast<std::size_t>(trial % 97) : 4096;
    Case c;
    c.logits.resize(vocab);
    for (float& x : c.logits) {
      const int r = static_cast<int>(gen() % 16);
      x = r == 0 ? -kInf : r == 1 ? -0.0f : r == 2 ? 0.0f : static_cast<float>(static_cast<int>(gen() % 7) - 3);
    }
    c.params.temperature = 0.0f;
    c.output = {static_cast<std::int32_t>(gen() % vocab)};
    c.eos = {static_cast<std::int32_t>(gen() % vocab)};
    switch (trial % 5) {
      case 1: c.params.repetition_penalty = 1.5f; break;
      case 2: c.params.frequency_penalty = 0.5f; break;
      case 3: c.params.min_tokens = 5; break;  // masks the EOS id
      case 4: c.params.logit_bias = {{static_cast<std::int32_t>(gen() % vocab), 2.5f}}; break;
      default: break;
    }
    const std::vector<double> want = reference_probs(c);
    const auto ref = static_cast<std::int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
    if (std::all_of(c.logits.begin(), c.logits.end(), [](float x) { return x == -kInf; })) continue;
    if (c.params.min_tokens > 0 && want[static_cast<std::size_t>(ref)] == 0.0) continue;  // all masked
    ASSERT_EQ(s.greedy_token(c.logits, c.params, c.history(), c.eos), ref) << "trial " << trial;
    RandomStream rng(0, RandomPurpose::kToken, 0);
    ASSERT_EQ(s.sample(c.logits, c.params, c.history(), c.eos, rng).token, ref) << "trial " << trial;
  }
}

TEST(Greedy, ANaNAnywhereInTheRowIsReported) {
  // The scan's NaN test covers the 16-lane blocks and the tail alike (the engine checks rows first;
  // this is the sampler's own guard).
  for (const std::size_t at : {std::size_t{0}, std::size_t{5}, std::size_t{17}, std::size_t{40}}) {
    std::vector<float> row(41, 1.0f);
    row[at] = std::nanf("");
    Sampler s;
    SamplingParams p;
    p.temperature = 0.0f;
    const absl::StatusOr<std::int32_t> t = s.try_greedy_token(row, p, TokenHistory{}, {});
    ASSERT_FALSE(t.ok()) << "NaN at " << at;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(t.status().message().find("NaN"), std::string::npos) << t.status();
  }
}

// Rows the sampler cannot take are errors the engine fails one request with, not aborts.
TEST(TrySample, RowsThatCannotBeSampledAreReportedNotFatal) {
  Sampler s;
  const std::vector<std::int32_t> output = {1, 2};
  const TokenHistory history{{}, output};
  SamplingParams hot;  // host-side processing: a penalty, then temperature
  hot.temperature = 0.5f;
  hot.repetition_penalty = 1.1f;
  RandomStream rng(3, RandomPurpose::kToken, 0);

  std::vector<float> huge(8, 1.0f);
  huge[5] = 3e38f;  // finite, but 6e38 after temperature 0.5
  absl::StatusOr<SampleResult> r = s.try_sample(huge, hot, history, {}, rng);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("after penalties and temperature"), std::string::npos) << r.status();

  std::vector<float> none(8, -kInf);
  SamplingParams greedy_penalised = hot;
  greedy_penalised.temperature = 0.0f;
  for (const SamplingParams& p : {hot, greedy_penalised}) {
    r = s.try_sample(none, p, history, {}, rng);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  }

  std::vector<float> plus_inf(8, 0.5f);
  plus_inf[2] = kInf;
  SamplingParams logprobs;
  logprobs.temperature = 0.0f;
  logprobs.logprobs = 1;
  r = s.try_sample(plus_inf, logprobs, TokenHistory{}, {}, rng);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("+inf"), std::string::npos) << r.status();

  // The same sampler goes on with good rows.
  const std::vector<float> good = {0.1f, 2.0f, 0.3f, -1.0f, 0.0f, 0.2f, 0.1f, 0.0f};
  r = s.try_sample(good, greedy_penalised, history, {}, rng);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token, 1);
}

}  // namespace
}  // namespace baton
