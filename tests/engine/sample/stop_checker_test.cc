// StopChecker: the finish rules in order (stop ids / EOS, stop strings, max_tokens), stop strings
// split across tokens, held-back text, include_stop_str_in_output, a randomized comparison with a
// brute-force restatement of the rules, and that the work over a request is linear in its output.
#include "engine/sample/stop_checker.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

// Token i decodes to pieces[i]; the text of an output is the concatenation. Counts its work.
class PieceDecoder : public TextDecoder {
 public:
  explicit PieceDecoder(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  void append(std::span<const std::int32_t> new_tokens) override {
    EXPECT_FALSE(finished_) << "append after finish";
    tokens_fed += new_tokens.size();
    for (std::int32_t t : new_tokens) text_ += pieces_.at(static_cast<std::size_t>(t));
  }
  void finish() override { finished_ = true; }
  const std::string& text() const override { return text_; }

  std::size_t tokens_fed = 0;

 private:
  std::vector<std::string> pieces_;
  std::string text_;
  bool finished_ = false;
};

// A decision with its visible text spelled out.
struct Seen {
  FinishReason reason = FinishReason::kNone;
  std::optional<std::int32_t> stop_token;
  std::optional<std::string> stop_string;
  std::string visible_text;
};

Seen seen(const StopChecker& checker, const StopDecision& d) {
  return {d.reason, d.stop_token, d.stop_string, std::string(checker.text().substr(0, d.visible_len))};
}

// Feeds tokens one at a time, as the engine does, returning every decision.
std::vector<Seen> run(StopChecker& checker, const std::vector<std::int32_t>& tokens) {
  std::vector<Seen> out;
  std::vector<std::int32_t> output;
  for (std::int32_t t : tokens) {
    output.push_back(t);
    out.push_back(seen(checker, checker.check(output)));
    if (out.back().reason != FinishReason::kNone) break;
  }
  return out;
}

// One request: a decoder holds one output's state, so each checker gets a fresh one.
struct Checker {
  Checker(const std::vector<std::string>& pieces, const SamplingParams& params, std::span<const std::int32_t> eos)
      : decoder(pieces), checker(params, eos, &decoder) {}
  std::vector<Seen> run(const std::vector<std::int32_t>& tokens) { return baton::run(checker, tokens); }
  PieceDecoder decoder;
  StopChecker checker;
};

TEST(FinishReason, Names) {
  EXPECT_STREQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::kAbort), "abort");
  EXPECT_STREQ(finish_reason_name(FinishReason::kNone), "none");
}

class StopTokens : public ::testing::Test {
 protected:
  std::vector<std::string> pieces_{"Hello", " world", "</s>", "<|stop|>"};
  std::vector<std::int32_t> eos_{2};
  SamplingParams params_;
};

TEST_F(StopTokens, EosStopsAndItsTextIsLeftOutUnlessAskedFor) {
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({0, 1, 2});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].visible_text, "Hello world");
  EXPECT_EQ(d[2].reason, FinishReason::kStop);
  EXPECT_EQ(d[2].stop_token, 2);
  EXPECT_FALSE(d[2].stop_string.has_value());
  EXPECT_EQ(d[2].visible_text, "Hello world");
  EXPECT_EQ(checker.decoder.tokens_fed, 2u);  // the EOS token never reaches the decoder

  params_.include_stop_str_in_output = true;
  Checker with_text(pieces_, params_, eos_);
  EXPECT_EQ(with_text.run({0, 1, 2}).back().visible_text, "Hello world</s>");
  EXPECT_EQ(with_text.decoder.tokens_fed, 3u);
}

TEST_F(StopTokens, IgnoreEosSkipsEosButNotStopTokenIds) {
  params_.ignore_eos = true;
  params_.stop_token_ids = {3};
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({0, 2, 1, 3});
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].visible_text, "Hello</s>");
  EXPECT_EQ(d[3].reason, FinishReason::kStop);
  EXPECT_EQ(d[3].stop_token, 3);
  EXPECT_EQ(d[3].visible_text, "Hello</s> world");
}

TEST_F(StopTokens, MinTokensDefersThem) {
  params_.min_tokens = 3;
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({2, 2, 2});
  EXPECT_EQ(d[0].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[2].reason, FinishReason::kStop);  // the third token: output.size() >= min_tokens
  EXPECT_EQ(d[2].visible_text, "</s></s>");
}

TEST_F(StopTokens, MaxTokensGivesLengthWithTheWholeText) {
  params_.max_tokens = 2;
  params_.stop = {" worlds"};  // " world" is a proper prefix: held back while running
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({0, 1, 0});
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
  std::vector<std::string> pieces_{"Hi ", "ST", "O", "P!", "Hello", " wor", "ld", "?", "fooSTOPbar"};
  std::vector<std::int32_t> eos_;
  SamplingParams params_;
  void SetUp() override { params_.max_tokens = 100; }
};

TEST_F(StopStrings, SplitAcrossTokensWithHeldBackPrefix) {
  params_.stop = {"STOP"};
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({0, 1, 2, 3});
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
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({0, 1, 2, 3});
  EXPECT_EQ(d[1].visible_text, "Hi ST");
  EXPECT_EQ(d[3].visible_text, "Hi STOP");  // cut right after the match: "!" is dropped
}

TEST_F(StopStrings, HeldBackTextIsReleasedWhenItStopsBeingAPrefix) {
  params_.stop = {"world!"};
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({4, 5, 6, 7});
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1].visible_text, "Hello ");       // "wor" held back
  EXPECT_EQ(d[2].visible_text, "Hello ");       // "world" held back
  EXPECT_EQ(d[3].visible_text, "Hello world?");
  EXPECT_EQ(d[3].reason, FinishReason::kNone);
}

TEST_F(StopStrings, LongestPrefixOverAllStopStringsIsHeldBack) {
  params_.stop = {"d?x", "orld"};
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({4, 5, 6, 7});
  EXPECT_EQ(d[1].visible_text, "Hello w");      // "or" starts "orld"
  EXPECT_EQ(d[2].reason, FinishReason::kStop);  // " world" contains "orld"
  EXPECT_EQ(d[2].visible_text, "Hello w");
}

TEST_F(StopStrings, MatchInsideOneTokenCutsTheRest) {
  params_.stop = {"STOP"};
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({8});
  EXPECT_EQ(d[0].reason, FinishReason::kStop);
  EXPECT_EQ(d[0].visible_text, "foo");
  params_.include_stop_str_in_output = true;
  Checker with_text(pieces_, params_, eos_);
  EXPECT_EQ(with_text.run({8})[0].visible_text, "fooSTOP");
}

TEST_F(StopStrings, EarliestMatchWinsThenTheFirstListed) {
  params_.stop = {"bar", "OP", "oo"};
  Checker checker(pieces_, params_, eos_);
  auto d = checker.run({8});
  EXPECT_EQ(d[0].stop_string, "oo");
  EXPECT_EQ(d[0].visible_text, "f");

  params_.stop = {"STO", "ST"};
  Checker tie(pieces_, params_, eos_);
  EXPECT_EQ(tie.run({8})[0].stop_string, "STO");
}

TEST_F(StopStrings, IgnoredWithinTheFirstMinTokensButMayStraddleTheBoundary) {
  params_.stop = {"STOP"};
  params_.min_tokens = 2;
  Checker checker(pieces_, params_, eos_);
  // "fooSTOPbar" twice is inside the first 2 tokens; the third token completes a new "STOP".
  auto d = checker.run({8, 1, 2, 3});
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1].reason, FinishReason::kNone);
  EXPECT_EQ(d[1].visible_text, "fooSTOPbar");  // "ST" held back
  EXPECT_EQ(d[2].reason, FinishReason::kNone);
  EXPECT_EQ(d[3].reason, FinishReason::kStop);
  EXPECT_EQ(d[3].visible_text, "fooSTOPbar");  // cut at the new match, not the old one

  params_.min_tokens = 1;
  Checker straddle(pieces_, params_, eos_);
  auto s = straddle.run({1, 2, 3});  // "ST" is token 1 (within min_tokens), "O" completes nothing yet
  EXPECT_EQ(s.back().reason, FinishReason::kStop);
  EXPECT_EQ(s.back().visible_text, "");
}

TEST(FinishRules, AppliedInOrder) {
  const std::vector<std::string> pieces = {"a", "b", "STOP", "<eos>"};
  std::vector<std::int32_t> eos{3};
  SamplingParams p;
  p.max_tokens = 2;
  p.stop = {"STOP", "a<eos>"};
  {
    // The second token is EOS, its text completes "a<eos>", and it is the max_tokens-th: EOS wins.
    Checker checker(pieces, p, eos);
    const Seen d = checker.run({0, 3}).back();
    EXPECT_EQ(d.reason, FinishReason::kStop);
    EXPECT_EQ(d.stop_token, 3);
    EXPECT_FALSE(d.stop_string.has_value());
    EXPECT_EQ(d.visible_text, "a");
  }
  {
    // A stop string on the max_tokens-th token: stop, not length.
    Checker checker(pieces, p, eos);
    const Seen d = checker.run({0, 2}).back();
    EXPECT_EQ(d.reason, FinishReason::kStop);
    EXPECT_EQ(d.stop_string, "STOP");
    EXPECT_EQ(d.visible_text, "a");
  }
  {
    Checker checker(pieces, p, eos);
    const Seen d = checker.run({0, 1}).back();
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

    PieceDecoder decoder(pieces);
    StopChecker checker(p, {}, &decoder);
    std::vector<std::int32_t> output;
    std::string previous, previous_text;
    for (std::size_t n = 1; n <= tokens.size(); ++n) {
      output.push_back(tokens[n - 1]);
      const Seen d = seen(checker, checker.check(output));
      ASSERT_TRUE(checker.text().starts_with(previous_text)) << "the decoder's text was rewritten";
      previous_text = checker.text();
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

// The work over a request is linear in its output: the decoder gets each token once, the search
// looks only at new text (plus the bytes a stop string can straddle), and streaming as the engine
// does (text().substr(sent, visible_len - sent)) hands out each byte once. Re-decoding, copying or
// searching the whole text on every token, as the checker once did, costs ~N^2/2 here (over 10^8
// tokens or bytes) instead of a small multiple of N.
TEST(StopCheckerCost, LinearInOutputLength) {
  constexpr std::size_t kTokens = 20000;
  // "S", "ST", "STO", "STOP" keep starting "STOP!" (held back, then released); nothing completes it.
  const std::vector<std::string> pieces = {"ab ", "S", "T", "O", "P", "x"};
  SamplingParams p;
  p.max_tokens = static_cast<std::int32_t>(kTokens);
  p.stop = {"STOP!", "never seen"};
  PieceDecoder decoder(pieces);
  StopChecker checker(p, {}, &decoder);
  std::mt19937 gen(7);
  std::vector<std::int32_t> output;
  std::string streamed;
  std::size_t sent = 0, held_back_calls = 0;
  StopDecision d;
  while (d.reason == FinishReason::kNone) {
    // Mostly "STOP" in order, so prefixes of the stop string are held back often.
    const std::int32_t next = gen() % 4 == 0 ? static_cast<std::int32_t>(gen() % pieces.size())
                                             : static_cast<std::int32_t>(1 + output.size() % 4);
    output.push_back(next);
    d = checker.check(output);
    ASSERT_GE(d.visible_len, sent);
    if (d.visible_len < checker.text().size()) ++held_back_calls;
    streamed += checker.text().substr(sent, d.visible_len - sent);
    sent = d.visible_len;
  }
  EXPECT_EQ(d.reason, FinishReason::kLength);
  ASSERT_EQ(output.size(), kTokens);
  EXPECT_GT(held_back_calls, kTokens / 4);
  EXPECT_EQ(streamed, checker.text());
  EXPECT_EQ(decoder.tokens_fed, kTokens);

  // Each byte of the text once, whatever the stop strings.
  EXPECT_EQ(checker.searched_bytes(), checker.text().size());
}

TEST(StopCheckerCost, ManyLongStopStringsStayLinear) {
  // 1,000 stop strings of 1 KiB whose prefixes the text keeps matching: each byte is still fed to
  // the automaton once, and what is held back is the longest matching prefix.
  SamplingParams p;
  p.max_tokens = 2000;
  for (int i = 0; i < 1000; ++i) p.stop.push_back(std::string(1023, 'a') + std::to_string(i % 10));
  PieceDecoder decoder({"a", "b"});
  StopChecker checker(p, {}, &decoder);
  std::vector<std::int32_t> output;
  StopDecision d;
  for (int i = 0; i < 2000 && d.reason == FinishReason::kNone; ++i) {
    output.push_back(i % 700 == 699 ? 1 : 0);  // runs of 699 "a", then a "b"
    d = checker.check(output);
    if (d.reason != FinishReason::kNone) break;  // the last token: everything is shown
    // The tail of "a"s (at most 1023 of them) could still become a stop string.
    std::size_t tail = 0;
    while (tail < checker.text().size() && checker.text()[checker.text().size() - 1 - tail] == 'a') ++tail;
    ASSERT_EQ(checker.text().size() - d.visible_len, std::min<std::size_t>(tail, 1023)) << i;
  }
  EXPECT_EQ(d.reason, FinishReason::kLength);
  EXPECT_EQ(checker.searched_bytes(), checker.text().size());
}

}  // namespace
}  // namespace baton
