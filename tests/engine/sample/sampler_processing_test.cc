// The sampler's logits processing against the brute-force reference (sampler_reference.h):
// temperature, top-k, top-p, min-p in the reference order, penalties and min_tokens.
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
// Temperature, top-k, top-p, min-p against the reference


TEST(Processing, TemperatureAlone) {
  Sampler s;
  for (float t : {0.05f, 0.7f, 1.0f, 3.0f}) {
    Case c{random_logits(300, 1, 3.0f), {}, {}, {}, {}};
    c.params.temperature = t;
    expect_matches_reference(s, c, "T " + std::to_string(t));
    // Independently of the fp32 choices: a double-precision softmax of logit / T.
    std::vector<double> scaled;
    for (float x : c.logits) scaled.push_back(static_cast<double>(x) / t);
    expect_probs_near(target(s, c), softmax(scaled));
  }
}

TEST(Processing, TopK) {
  Sampler s;
  const std::size_t vocab = 200;
  for (std::int32_t k : {1, 2, 5, 199, 200, 207, 0, -1}) {
    Case c{random_logits(vocab, 2, 2.0f), {}, {}, {}, {}};
    c.params.top_k = k;
    c.params.temperature = 0.8f;
    expect_matches_reference(s, c, "k " + std::to_string(k));
    const std::size_t expect_kept = k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(k), vocab) : vocab;
    EXPECT_EQ(count_nonzero(target(s, c)), expect_kept) << k;
  }
}

TEST(Processing, TopKKeepsAllTiesAtTheKthValue) {
  Sampler s;
  Case c{{5.0f, 4.0f, 4.0f, 4.0f, 1.0f, 4.0f}, {}, {}, {}, {}};
  c.params.top_k = 2;
  const std::vector<float> p = target(s, c);
  EXPECT_GT(p[0], 0.0f);
  EXPECT_EQ(p[4], 0.0f);
  EXPECT_EQ(count_nonzero(p), 5u);
  EXPECT_FLOAT_EQ(p[1], p[5]);
  expect_matches_reference(s, c, "ties");
}

TEST(Processing, TopP) {
  Sampler s;
  for (float top_p : {1e-6f, 0.1f, 0.5f, 0.8f, 0.9f, 0.999f, 1.0f}) {
    for (float scale : {0.3f, 1.0f, 4.0f}) {
      Case c{random_logits(500, 3, scale), {}, {}, {}, {}};
      c.params.top_p = top_p;
      expect_matches_reference(s, c, "p " + std::to_string(top_p) + " scale " + std::to_string(scale));
    }
  }
}

TEST(Processing, TinyTopPKeepsExactlyTheArgmax) {
  Sampler s;
  Case c{{3.0f, 1.0f, 3.0f, 2.9f}, {}, {}, {}, {}};
  c.params.top_p = 1e-6f;
  EXPECT_EQ(target(s, c), (std::vector<float>{1, 0, 0, 0}));  // ties: the lower id comes first
}

TEST(Processing, TopPTiesKeepLowerIdsFirst) {
  Sampler s;
  Case c{{2.0f, 2.0f, 2.0f, 2.0f}, {}, {}, {}, {}};
  c.params.top_p = 0.5f;
  EXPECT_EQ(target(s, c), (std::vector<float>{0.5f, 0.5f, 0, 0}));
  c.params.top_p = 0.51f;
  EXPECT_EQ(count_nonzero(target(s, c)), 3u);
}

TEST(Processing, MinP) {
  Sampler s;
  for (float min_p : {0.0f, 0.01f, 0.1f, 0.5f}) {
    Case c{random_logits(400, 4, 2.0f), {}, {}, {}, {}};
    c.params.min_p = min_p;
    c.params.temperature = 1.3f;
    expect_matches_reference(s, c, "min_p " + std::to_string(min_p));
  }
  Case c{{1.0f, 3.0f, 3.0f, 2.999f}, {}, {}, {}, {}};
  c.params.min_p = 1.0f;  // only tokens as likely as the most likely one
  EXPECT_EQ(target(s, c), (std::vector<float>{0, 0.5f, 0.5f, 0}));
}

TEST(Processing, TopPThenMinPInTheReferenceOrder) {
  // Probabilities ~ {0.5, 0.3, 0.15, 0.05}. top-p 0.9 keeps 3 (0.95 >= 0.9), then min-p 0.35
  // drops 0.15 (< 0.35 * 0.5). Applying min-p first and top-p on the renormalized rest would
  // differ in general; here it fixes the expected kept set by hand.
  Sampler s;
  Case c{{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)}, {}, {}, {}, {}};
  c.params.top_p = 0.9f;
  c.params.min_p = 0.35f;
  const std::vector<float> p = target(s, c);
  EXPECT_NEAR(p[0], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(p[1], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
  expect_matches_reference(s, c, "top-p then min-p");
}

TEST(Processing, RandomSweepOfEveryRule) {
  Sampler s;  // one sampler across vocab sizes: scratch is resized as needed
  std::mt19937 gen(2024);
  for (std::size_t vocab : {1u, 2u, 3u, 17u, 1000u, 50000u}) {
    for (int trial = 0; trial < 12; ++trial) {
      const auto v = static_cast<std::int32_t>(vocab);
      std::uniform_int_distribution<std::int32_t> token(0, v - 1);
      Case c{random_logits(vocab, gen(), std::uniform_real_distribution<float>(0.2f, 5.0f)(gen)), {}, {}, {}, {}};
      SamplingParams& p = c.params;
      p.temperature = std::uniform_real_distribution<float>(0.2f, 2.0f)(gen);
      p.top_k = std::vector<std::int32_t>{0, 1, 3, 50, v, v + 3}[gen() % 6];
      p.top_p = std::vector<float>{1.0f, 0.3f, 0.9f, 0.97f}[gen() % 4];
      p.min_p = std::vector<float>{0.0f, 0.02f, 0.2f}[gen() % 3];
      p.repetition_penalty = std::vector<float>{1.0f, 1.3f, 0.8f}[gen() % 3];
      p.presence_penalty = std::vector<float>{0.0f, 0.7f, -0.4f}[gen() % 3];
      p.frequency_penalty = std::vector<float>{0.0f, 0.3f, -0.2f}[gen() % 3];
      for (int i = 0; i < 20; ++i) c.prompt.push_back(token(gen));
      for (int i = 0; i < static_cast<int>(gen() % 10); ++i) c.output.push_back(token(gen));
      p.min_tokens = static_cast<std::int32_t>(gen() % 12);
      p.max_tokens = 100;
      p.stop_token_ids = {token(gen)};
      c.eos = {token(gen)};
      p.ignore_eos = gen() % 2 == 0;
      if (vocab <= 2) p.min_tokens = 0;  // masking could empty the vocabulary; tested separately
      expect_matches_reference(s, c, "vocab " + std::to_string(vocab) + " trial " + std::to_string(trial));
    }
  }
}

TEST(Processing, LargeVocabularyTopPAndTopK) {
  // 128K tokens, peaked and flat rows: the top-p prefilter's boundary bucket is small in the first
  // and holds tens of thousands of tokens in the second.
  Sampler s;
  for (float scale : {0.3f, 3.0f}) {
    for (float top_p : {0.5f, 0.9f, 0.95f}) {
      for (std::int32_t top_k : {0, 1000}) {
        Case c{random_logits(131072, 77, scale), {}, {}, {}, {}};
        c.params.top_p = top_p;
        c.params.top_k = top_k;
        expect_matches_reference(s, c,
                                 "scale " + std::to_string(scale) + " p " + std::to_string(top_p) + " k " +
                                     std::to_string(top_k));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Penalties and min_tokens

TEST(Penalties, RepetitionCoversPromptAndOutputOncePerToken) {
  Sampler s;
  Case c{{2.0f, -2.0f, 1.0f, 0.5f, 3.0f}, {}, {0, 0, 1}, {2, 2}, {}};
  c.params.repetition_penalty = 2.0f;
  // positive: divided; negative: multiplied; duplicates penalized once; 3 and 4 untouched.
  expect_probs_near(target(s, c), softmax({1.0, -4.0, 0.5, 0.5, 3.0}));
}

TEST(Penalties, PresenceAndFrequencyCountOutputTokensOnly) {
  Sampler s;
  Case c{{0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, {}, {0, 0}, {1, 2, 2, 2}, {}};
  c.params.presence_penalty = 0.5f;
  c.params.frequency_penalty = 0.25f;
  expect_probs_near(target(s, c), softmax({0.0, -0.75, -1.25, 0.0, 0.0}));
  c.params.presence_penalty = -1.0f;  // negative values encourage repeats
  c.params.frequency_penalty = 0.0f;
  expect_probs_near(target(s, c), softmax({0.0, 1.0, 1.0, 0.0, 0.0}));
}

TEST(Penalties, RepetitionComesBeforePresence) {
  Sampler s;
  Case c{{2.0f, 0.0f}, {}, {}, {0}, {}};
  c.params.repetition_penalty = 2.0f;
  c.params.presence_penalty = 1.0f;
  // 2 / 2 - 1 = 0 (the other order would give (2 - 1) / 2 = 0.5).
  expect_probs_near(target(s, c), {0.5f, 0.5f});
}

TEST(MinTokens, MasksStopIdsAndEosWhileTheOutputIsShort) {
  Sampler s;
  Case c{{1.0f, 0.0f, 2.0f, -1.0f, 3.0f}, {}, {}, {7, 7}, {4}};
  c.params.temperature = 0.0f;
  c.params.stop_token_ids = {2};
  c.params.min_tokens = 3;
  RandomStream rng(0, RandomPurpose::kToken, 0);
  EXPECT_EQ(s.sample(c.logits, c.params, c.history(), c.eos, rng).token, 0);  // 4 (EOS) and 2 masked
  c.params.temperature = 1.0f;
  std::vector<float> p = target(s, c);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_EQ(p[4], 0.0f);
  expect_probs_near(p, softmax({1.0, 0.0, -INFINITY, -1.0, -INFINITY}));

  c.params.ignore_eos = true;  // EOS is then an ordinary token; stop ids stay masked
  p = target(s, c);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_GT(p[4], 0.5f);

  c.params.ignore_eos = false;
  c.output = {7, 7, 7};  // long enough: nothing masked
  EXPECT_EQ(count_nonzero(target(s, c)), 5u);
  c.params.temperature = 0.0f;
  EXPECT_EQ(s.sample(c.logits, c.params, c.history(), c.eos, rng).token, 4);
}

TEST(MinTokens, OutOfRangeEosIdsAndMaskingEverythingAreHarmless) {
  Sampler s;
  Case c{{0.0f, 1.0f}, {}, {}, {}, {-3, 99}};
  c.params.min_tokens = 2;
  expect_probs_near(target(s, c), softmax({0.0, 1.0}));
  c.params.stop_token_ids = {0, 1};  // would leave nothing: min_tokens is not honoured
  expect_probs_near(target(s, c), softmax({0.0, 1.0}));
  RandomStream rng(1, RandomPurpose::kToken, 0);
  const std::int32_t t = s.sample(c.logits, c.params, c.history(), c.eos, rng).token;
  EXPECT_TRUE(t == 0 || t == 1);
}

}  // namespace
}  // namespace baton
