// `baton tokenize` (cli/tokenize.cc): encodes stdin lines to JSON id arrays without special tokens,
// decodes JSON id arrays back to JSON strings, and exits 2 on bad usage, 1 when loading fails.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "cli/tokenize.h"
#include "nlohmann/json.hpp"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace baton {
namespace {

// Runs tokenize_main with `input` on std::cin; returns stdout and sets `code`.
std::string run(std::vector<std::string> args, const std::string& input, int& code) {
  std::istringstream in(input);
  std::ostringstream out;
  auto* old_in = std::cin.rdbuf(in.rdbuf());
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  std::vector<char*> argv;
  args.insert(args.begin(), "tokenize");
  for (auto& a : args) argv.push_back(a.data());
  code = cli::tokenize_main(static_cast<int>(argv.size()), argv.data());
  std::cin.rdbuf(old_in);
  std::cout.rdbuf(old_out);
  return out.str();
}

TEST(TokenizeCli, EncodesAndDecodesLines) {
  auto dirs = testing::real_tokenizer_dirs();
  std::string problem = testing::reference_setup_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  const std::string model = dirs[2].path;  // llama2: its post-processor would add BOS
  auto tokenizer = Tokenizer::load(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  int code = -1;
  std::string out = run({"--model", model}, "Hello world\n<s>x\n", code);
  EXPECT_EQ(code, 0);
  std::string expected = nlohmann::json((*tokenizer)->encode("Hello world", false)).dump() + "\n" +
                         nlohmann::json((*tokenizer)->encode("<s>x", false)).dump() + "\n";
  EXPECT_EQ(out, expected);

  out = run({"--model", model, "--decode"}, "[1, 22557, 1526]\n[]\n", code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, nlohmann::json((*tokenizer)->decode(std::vector<std::int32_t>{1, 22557, 1526}, false)).dump() +
                     "\n\"\"\n");
  out = run({"--model", model, "--decode", "--skip-special-tokens"}, "[1, 22557]\n", code);
  EXPECT_EQ(out, nlohmann::json((*tokenizer)->decode(std::vector<std::int32_t>{1, 22557}, true)).dump() + "\n");
}

TEST(TokenizeCli, ExitCodes) {
  int code = -1;
  ::testing::internal::CaptureStderr();
  run({}, "", code);
  EXPECT_EQ(code, 2);
  run({"--model"}, "", code);
  EXPECT_EQ(code, 2);
  run({"--bogus"}, "", code);
  EXPECT_EQ(code, 2);
  run({"--model", "/nonexistent"}, "", code);
  EXPECT_EQ(code, 1);
  run({"--model", testing::real_tokenizer_dirs()[0].path, "--decode"}, "[1, \"x\"]\n", code);
  EXPECT_EQ(code, 2);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("/nonexistent"), std::string::npos);
  EXPECT_NE(err.find("line 1"), std::string::npos);
  run({"--help"}, "", code);
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace baton
