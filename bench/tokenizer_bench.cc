// Encode throughput of Baton's tokenizer on one thread: the corpus file as one text, encoded
// `--repeat` times (after one warm-up pass), reported as one JSON line. tokenizer_bench.sh runs it
// next to Hugging Face `tokenizers` on the same input and prints the ratio.
//
//   tokenizer_bench --model DIR --corpus FILE [--repeat N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string model, corpus;
  int repeat = 200;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (arg == "--corpus" && i + 1 < argc) {
      corpus = argv[++i];
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: tokenizer_bench --model DIR --corpus FILE [--repeat N]\n");
      return 2;
    }
  }
  if (model.empty() || corpus.empty() || repeat <= 0) {
    std::fprintf(stderr, "usage: tokenizer_bench --model DIR --corpus FILE [--repeat N]\n");
    return 2;
  }
  auto tokenizer = baton::Tokenizer::load(model);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  std::ifstream in(corpus, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open\n", corpus.c_str());
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  std::size_t tokens = (*tokenizer)->encode(text, false).size();  // warm-up
  auto start = std::chrono::steady_clock::now();
  std::size_t total = 0;
  for (int r = 0; r < repeat; ++r) total += (*tokenizer)->encode(text, false).size();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"implementation\": \"baton\", \"tokens_per_call\": %zu, \"calls\": %d, \"seconds\": %.6f, "
              "\"tokens_per_s\": %.1f, \"bytes_per_s\": %.1f}\n",
              tokens, repeat, seconds, static_cast<double>(total) / seconds,
              static_cast<double>(text.size()) * repeat / seconds);
  return 0;
}
