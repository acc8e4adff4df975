#include "cli/tokenize.h"

#include <climits>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/flags.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace baton::cli {

namespace {

const std::vector<FlagSpec>& tokenize_flags() {
  static const std::vector<FlagSpec> flags = {
      {"model", "DIR", "model directory, or a folder with tokenizer.json and tokenizer_config.json"},
      {"decode", "", "read JSON arrays of ids per line and print each decoded text as a JSON string"},
      {"skip-special-tokens", "", "with --decode: leave special tokens out of the text"},
      {"help", "", "show this help"},
  };
  return flags;
}

constexpr const char* kSynopsis =
    "--model DIR [--decode [--skip-special-tokens]] < input\n\n"
    "Encodes each line of standard input (the line without its '\\n') and prints its token ids as a\n"
    "JSON array, without BOS or other special tokens. With --decode, each input line is a JSON array\n"
    "of ids and the output line is the decoded text as a JSON string.";

int encode_lines(const Tokenizer& tokenizer) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::cout << nlohmann::json(tokenizer.encode(line, /*add_special_tokens=*/false)).dump() << '\n';
  }
  std::cout.flush();
  return 0;
}

int decode_lines(const Tokenizer& tokenizer, bool skip_special_tokens) {
  std::string line;
  for (long line_number = 1; std::getline(std::cin, line); ++line_number) {
    auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    bool ok = parsed.is_array();
    std::vector<std::int32_t> ids;
    for (const auto& v : ok ? parsed : nlohmann::json::array()) {
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > INT32_MAX) {
        ok = false;
        break;
      }
      ids.push_back(v.get<std::int32_t>());
    }
    if (!ok) {
      std::cout.flush();
      std::fprintf(stderr, "baton tokenize --decode: stdin line %ld is not a JSON array of non-negative token ids: %s\n",
                   line_number, line.substr(0, 200).c_str());
      return 2;
    }
    std::cout << nlohmann::json(tokenizer.decode(ids, skip_special_tokens)).dump() << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace

int tokenize_main(int argc, char** argv) {
  auto flags = parse_flags(tokenize_flags(), argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "baton tokenize: %s\n\n%s", std::string(flags.status().message()).c_str(),
                 usage("baton tokenize", kSynopsis, tokenize_flags()).c_str());
    return 2;
  }
  if (flags->has("help")) {
    std::printf("%s", usage("baton tokenize", kSynopsis, tokenize_flags()).c_str());
    return 0;
  }
  auto model = flags->get("model");
  if (!model) {
    std::fprintf(stderr, "baton tokenize: --model DIR is required\n\n%s",
                 usage("baton tokenize", kSynopsis, tokenize_flags()).c_str());
    return 2;
  }
  if (flags->has("skip-special-tokens") && !flags->has("decode")) {
    std::fprintf(stderr, "baton tokenize: --skip-special-tokens only applies with --decode\n");
    return 2;
  }
  if (!Tokenizer::has_tokenizer_files(*model)) {
    std::fprintf(stderr,
                 "baton tokenize: %s has no tokenizer.json and tokenizer_config.json; point --model at a Hugging "
                 "Face model directory that includes its tokenizer files\n",
                 model->c_str());
    return 1;
  }
  auto tokenizer = Tokenizer::load(*model);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "baton tokenize: %s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  if (flags->has("decode")) return decode_lines(**tokenizer, flags->has("skip-special-tokens"));
  return encode_lines(**tokenizer);
}

}  // namespace baton::cli
