// TokenizerTextDecoder, the TextDecoder the engine gets from the tokenizer: fed in chunks of any
// size, its text only grows, is valid UTF-8 at every step, and ends equal to a one-shot decode of
// the whole output; finish() is idempotent and appending after it is a bug.
#include <gtest/gtest.h>

#include <random>

#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_text_decoder.h"

namespace baton {
namespace {

using testing::valid_utf8;

using Ids = std::vector<std::int32_t>;

TEST(TokenizerTextDecoder, GrowsInChunksToTheFullDecode) {
  auto dirs = testing::fixture_tokenizer_dirs();
  dirs.push_back(testing::bundled_tokenizer_dir());
  for (const auto& dir : dirs) {
    auto tok = Tokenizer::load(dir.path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    std::mt19937 rng(11);
    const auto vocab = static_cast<std::uint32_t>((*tok)->vocab_size());
    for (int trial = 0; trial < 200; ++trial) {
      // Low ids are where the fixtures keep specials and byte-fallback tokens.
      Ids ids(1 + rng() % 40);
      for (auto& id : ids) id = static_cast<std::int32_t>(rng() % 4 == 0 ? rng() % 8 : rng() % vocab);
      for (bool skip : {true, false}) {
        TokenizerTextDecoder decoder(**tok, skip);
        std::string previous;
        for (std::size_t at = 0; at < ids.size();) {
          const std::size_t chunk = std::min<std::size_t>(ids.size() - at, 1 + rng() % 3);
          decoder.append(std::span<const std::int32_t>(ids).subspan(at, chunk));
          at += chunk;
          ASSERT_TRUE(decoder.text().starts_with(previous)) << dir.name << " trial " << trial;
          ASSERT_TRUE(valid_utf8(decoder.text())) << dir.name << " trial " << trial;
          previous = decoder.text();
        }
        decoder.finish();
        EXPECT_TRUE(decoder.text().starts_with(previous));
        EXPECT_EQ(decoder.text(), (*tok)->decode(ids, skip)) << dir.name << " trial " << trial << " skip " << skip;
      }
    }
  }
}

TEST(TokenizerTextDecoder, FinishIsIdempotentAndAppendAfterItIsABug) {
  auto tok = Tokenizer::load(testing::bundled_tokenizer_dir().path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Ids ids = (*tok)->encode("def f(x):\n    return x", false);
  TokenizerTextDecoder decoder(**tok, true);
  decoder.append(ids);
  decoder.finish();
  const std::string text = decoder.text();
  decoder.finish();
  EXPECT_EQ(decoder.text(), text);
  EXPECT_EQ(text, "def f(x):\n    return x");
  EXPECT_DEATH(decoder.append(ids), "after finish");
}

}  // namespace
}  // namespace baton
