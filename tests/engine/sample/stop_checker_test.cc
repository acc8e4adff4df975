// StopChecker: the finish rules in order (stop ids / EOS, stop strings, max_tokens), stop strings
// split across tokens, held-back text, include_stop_str_in_output, and a randomized comparison
// with a brute-force restatement of the rules.
#include "engine/sample/stop_checker.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

// Token i decodes to pieces[i]; the text of an output is the concatenation.
class PieceDecoder : public TextDecoder {
 public:
  explicit PieceDecoder(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  std::string decode(std::span<const std::int32_t> output_tokens, bool /*final*/) override {
    std::string text;
    for (std::int32_t t : output_tokens) text += pieces_.at(static_cast<std::size_t>(t));
    return text;
  }

 private:
  std::vector<std::string> pieces_;
};

// Feeds tokens one at a time, as the engine does, returning every decision.
std::vector<StopDecision> run(StopChecker& checker, const std::vector<std::int32_t>& tokens) {
  std::vector<StopDecision> out;
  std::vector<std::int32_t> output;
  for (std::int32_t t : tokens) {
    output.push_back(t);
    out.push_back(checker.check(output));
    if (out.back().reason != FinishReason::kNone) break;
  }
  return out;
}

TEST(FinishReason, Names) {
  EXPECT_STREQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::kAbort), "abort");
  EXPECT_STREQ(finish_reason_name(FinishReason::kNone), "none");
}

class StopTokens : public ::testing::Test {
 protected:
  PieceDecoder decoder_{{"Hello", " world", "</s>", "<|stop|>"}};
  std::vector<std::int32_t> eos_{2};
  SamplingParams params_;
};

TEST_F(StopTokens, EosStopsAndItsTextIsLeftOutUnlessAskedFor) {
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {0, 1, 2});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].visible_text, "Hello world");
  EXPECT_EQ(d[2].reason, FinishReason::kStop);
  EXPECT_EQ(d[2].stop_token, 2);
  EXPECT_FALSE(d[2].stop_string.has_value());
  EXPECT_EQ(d[2].visible_text, "Hello world");

  params_.include_stop_str_in_output = true;
  StopChecker with_text(params_, eos_, &decoder_);
  EXPECT_EQ(run(with_text, {0, 1, 2}).back().visible_text, "Hello world</s>");
}

TEST_F(StopTokens, IgnoreEosSkipsEosButNotStopTokenIds) {
  params_.ignore_eos = true;
  params_.stop_token_ids = {3};
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {0, 2, 1, 3});
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].visible_text, "Hello</s>");
  EXPECT_EQ(d[3].reason, FinishReason::kStop);
  EXPECT_EQ(d[3].stop_token, 3);
  EXPECT_EQ(d[3].visible_text, "Hello</s> world");
}

TEST_F(StopTokens, MinTokensDefersThem) {
  params_.min_tokens = 3;
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {2, 2, 2});
  EXPECT_EQ(d[0].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[2].reason, FinishReason::kStop);  // the third token: output.size() >= min_tokens
  EXPECT_EQ(d[2].visible_text, "</s></s>");
}

TEST_F(StopTokens, MaxTokensGivesLengthWithTheWholeText) {
  params_.max_tokens = 2;
  params_.stop = {" worlds"};  // " world" is a proper prefix: held back while running
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {0, 1, 0});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].visible_text, "Hello");
  EXPECT_EQ(d[1].reason, FinishReason::kLength);
  EXPECT_EQ(d[1].visible_text, "Hello world");
}

TEST_F(StopTokens, WorkWithoutADecoderWhenThereAreNoStopStrings) {
  params_.max_tokens = 3;
  StopChecker checker(params_, eos_, nullptr);
  auto d = run(checker, {0, 1, 2});
  EXPECT_EQ(d[2].reason, FinishReason::kStop);
  EXPECT_EQ(d[2].visible_text, "");
}

TEST_F(StopTokens, StopStringsWithoutADecoderAreABug) {
  params_.stop = {"x"};
  EXPECT_DEATH(StopChecker(params_, eos_, nullptr), "stop strings but no TextDecoder");
}

class StopStrings : public ::testing::Test {
 protected:
  //                          0      1     2    3     4       5          6       7      8
  PieceDecoder decoder_{{"Hi ", "ST", "O", "P!", "Hello", " wor", "ld", "?", "fooSTOPbar"}};
  std::vector<std::int32_t> eos_;
  SamplingParams params_;
  void SetUp() override { params_.max_tokens = 100; }
};

TEST_F(StopStrings, SplitAcrossTokensWithHeldBackPrefix) {
  params_.stop = {"STOP"};
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {0, 1, 2, 3});
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].visible_text, "Hi ");
  EXPECT_EQ(d[1].visible_text, "Hi ");  // "ST" could start "STOP"
  EXPECT_EQ(d[2].visible_text, "Hi ");  // "STO" too
  EXPECT_EQ(d[3].reason, FinishReason::kStop);
  EXPECT_EQ(d[3].stop_string, "STOP");
  EXPECT_FALSE(d[3].stop_token.has_value());
  EXPECT_EQ(d[3].visible_text, "Hi ");
}

TEST_F(StopStrings, IncludeStopStrInOutputKeepsItAndHoldsNothingBack) {
  params_.stop = {"STOP"};
  params_.include_stop_str_in_output = true;
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {0, 1, 2, 3});
  EXPECT_EQ(d[1].visible_text, "Hi ST");
  EXPECT_EQ(d[3].visible_text, "Hi STOP");  // cut right after the match: "!" is dropped
}

TEST_F(StopStrings, HeldBackTextIsReleasedWhenItStopsBeingAPrefix) {
  params_.stop = {"world!"};
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {4, 5, 6, 7});
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1].visible_text, "Hello ");       // "wor" held back
  EXPECT_EQ(d[2].visible_text, "Hello ");       // "world" held back
  EXPECT_EQ(d[3].visible_text, "Hello world?");
  EXPECT_EQ(d[3].reason, FinishReason::kNone);
}

TEST_F(StopStrings, LongestPrefixOverAllStopStringsIsHeldBack) {
  params_.stop = {"d?x", "orld"};
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {4, 5, 6, 7});
  EXPECT_EQ(d[1].visible_text, "Hello w");      // "or" starts "orld"
  EXPECT_EQ(d[2].reason, FinishReason::kStop);  // " world" contains "orld"
  EXPECT_EQ(d[2].visible_text, "Hello w");
}

TEST_F(StopStrings, MatchInsideOneTokenCutsTheRest) {
  params_.stop = {"STOP"};
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {8});
  EXPECT_EQ(d[0].reason, FinishReason::kStop);
  EXPECT_EQ(d[0].visible_text, "foo");
  params_.include_stop_str_in_output = true;
  StopChecker with_text(params_, eos_, &decoder_);
  EXPECT_EQ(run(with_text, {8})[0].visible_text, "fooSTOP");
}

TEST_F(StopStrings, EarliestMatchWinsThenTheFirstListed) {
  params_.stop = {"bar", "OP", "oo"};
  StopChecker checker(params_, eos_, &decoder_);
  auto d = run(checker, {8});
  EXPECT_EQ(d[0].stop_string, "oo");
  EXPECT_EQ(d[0].visible_text, "f");

  params_.stop = {"STO", "ST"};
  StopChecker tie(params_, eos_, &decoder_);
  EXPECT_EQ(run(tie, {8})[0].stop_string, "STO");
}

TEST_F(StopStrings, IgnoredWithinTheFirstMinTokensButMayStraddleTheBoundary) {
  params_.stop = {"STOP"};
  params_.min_tokens = 2;
  StopChecker checker(params_, eos_, &decoder_);
  // "fooSTOPbar" twice is inside the first 2 tokens; the third token completes a new "STOP".
  auto d = run(checker, {8, 1, 2, 3});
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].visible_text, "fooSTOPbar");  // "ST" held back
  EXPECT_EQ(d[2].reason, FinishReason::kNone);
  EXPECT_EQ(d[3].reason, FinishReason::kStop);
  EXPECT_EQ(d[3].visible_text, "fooSTOPbar");  // cut at the new match, not the old one

  params_.min_tokens = 1;
  StopChecker straddle(params_, eos_, &decoder_);
  auto s = run(straddle, {1, 2, 3});  // "ST" is token 1 (within min_tokens), "O" completes nothing yet
  EXPECT_EQ(s.back().reason, FinishReason::kStop);
  EXPECT_EQ(s.back().visible_text, "");
}

TEST(FinishRules, AppliedInOrder) {
  PieceDecoder decoder({"a", "b", "STOP", "<eos>"});
  std::vector<std::int32_t> eos{3};
  SamplingParams p;
  p.max_tokens = 2;
  p.stop = {"STOP", "a<eos>"};
  {
    // The second token is EOS, its text completes "a<eos>", and it is the max_tokens-th: EOS wins.
    StopChecker checker(p, eos, &decoder);
    const StopDecision d = run(checker, {0, 3}).back();
    EXPECT_EQ(d.reason, FinishReason::kStop);
    EXPECT_EQ(d.stop_token, 3);
    EXPECT_FALSE(d.stop_string.has_value());
    EXPECT_EQ(d.visible_text, "a");
  }
  {
    // A stop string on the max_tokens-th token: stop, not length.
    StopChecker checker(p, eos, &decoder);
    const StopDecision d = run(checker, {0, 2}).back();
    EXPECT_EQ(d.reason, FinishReason::kStop);
    EXPECT_EQ(d.stop_string, "STOP");
    EXPECT_EQ(d.visible_text, "a");
  }
  {
    StopChecker checker(p, eos, &decoder);
    const StopDecision d = run(checker, {0, 1}).back();
    EXPECT_EQ(d.reason, FinishReason::kLength);
    EXPECT_EQ(d.visible_text, "ab");
  }
}

// The rules restated over the whole text, with no incremental state: the request stops at the
// first n > min_tokens where some stop string occurs ending beyond the text of the first min_tokens
// tokens, cut at the earliest such start (first listed on ties).
struct Expected {
  FinishReason reason = FinishReason::kNone;
  std::string visible;
  std::string stop_string;
};

Expected brute_force(const std::vector<std::string>& pieces, const std::vector<std::int32_t>& tokens, std::size_t n,
                     const SamplingParams& p) {
  const auto min_tokens = static_cast<std::size_t>(p.min_tokens);
  std::string text, base;
  for (std::size_t i = 0; i < n; ++i) {
    text += pieces[static_cast<std::size_t>(tokens[i])];
    if (i + 1 == min_tokens) base = text;
  }
  Expected e;
  if (n > min_tokens) {
    for (std::size_t start = 0; start < text.size() && e.reason == FinishReason::kNone; ++start) {
      for (const std::string& s : p.stop) {
        if (text.compare(start, s.size(), s) == 0 && start + s.size() > base.size()) {
          e.reason = FinishReason::kStop;
          e.stop_string = s;
          e.visible = text.substr(0, start + (p.include_stop_str_in_output ? s.size() : 0));
          break;
        }
      }
    }
    if (e.reason != FinishReason::kNone) return e;
  }
  if (n >= static_cast<std::size_t>(p.max_tokens)) {
    e.reason = FinishReason::kLength;
    e.visible = text;
    return e;
  }
  std::size_t held = 0;
  if (!p.include_stop_str_in_output) {
    for (std::size_t len = 1; len <= text.size(); ++len) {
      const std::string tail = text.substr(text.size() - len);
      for (const std::string& s : p.stop) {
        if (len < s.size() && s.compare(0, len, tail) == 0) held = len;
      }
    }
  }
  e.visible = text.substr(0, text.size() - held);
  return e;
}

TEST(FinishRules, RandomizedAgainstBruteForce) {
  const std::vector<std::string> pieces = {"a", "b", "ab", "ba", "c", "bb", "", "cab", "abab"};
  PieceDecoder decoder(pieces);
  std::mt19937 gen(99);
  int stopped = 0, lengthed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    SamplingParams p;
    p.stop = std::vector<std::vector<std::string>>{{"aba", "bb"}, {"cab", "b"}, {"abab", "ca", "bc"}}[gen() % 3];
    p.min_tokens = static_cast<std::int32_t>(gen() % 4);
    p.max_tokens = 4 + static_cast<std::int32_t>(gen() % 20);
    p.include_stop_str_in_output = gen() % 2 == 0;
    std::vector<std::int32_t> tokens;
    for (int i = 0; i < 30; ++i) tokens.push_back(static_cast<std::int32_t>(gen() % pieces.size()));

    StopChecker checker(p, {}, &decoder);
    std::vector<std::int32_t> output;
    std::string previous;
    for (std::size_t n = 1; n <= tokens.size(); ++n) {
      output.push_back(tokens[n - 1]);
      const StopDecision d = checker.check(output);
      const Expected e = brute_force(pieces, tokens, n, p);
      ASSERT_EQ(d.reason, e.reason) << "trial " << trial << " n " << n;
      ASSERT_EQ(d.visible_text, e.visible) << "trial " << trial << " n " << n;
      ASSERT_EQ(d.stop_string.value_or(""), e.stop_string) << "trial " << trial << " n " << n;
      ASSERT_EQ(d.visible_text.compare(0, previous.size(), previous), 0)
          << "streamed text was taken back: " << previous << " -> " << d.visible_text;
      previous = d.visible_text;
      if (d.reason != FinishReason::kNone) {
        (d.reason == FinishReason::kStop ? stopped : lengthed)++;
        break;
      }
    }
  }
  EXPECT_GT(stopped, 500);  // both endings are exercised
  EXPECT_GT(lengthed, 50);
}

}  // namespace
}  // namespace baton
