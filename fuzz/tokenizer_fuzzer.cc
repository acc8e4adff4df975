// Fuzzes tokenizer.json loading, tokenizer/tokenizer.h: Tokenizer::load of a model directory whose
// tokenizer.json is the input (tokenizer_config.json is a fixed "{}"), and, when it loads, encoding
// and decoding a short fixed text with it — the model, normalizer, pre-tokenizer (PCRE2 patterns
// from the file), post-processor, decoder and added tokens all come from the input.
//
// Input: the bytes of tokenizer.json. Inputs over 16 KiB are not loaded (the -max_len of
// scripts/fuzz.sh is the same): they only make each run slower, and load time grows with the file.
//
// Checks: load returns (never throws or crashes); with a loaded tokenizer, encode of the fixed text
// (with and without special tokens) and decode of its ids plus unknown ids run, decode's text is
// valid UTF-8 (tokenizer.h promises it), and a DecodeStream fed the same ids one at a time yields
// exactly decode()'s text (tokenizer.h promises that too).
//
// Must not: read any file but the two it writes in its own scratch directory, or skip an input by
// its content.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr std::size_t kMaxInputBytes = 16 << 10;

// Words, digits, code, whitespace runs, non-ASCII (2-, 3- and 4-byte UTF-8), invalid UTF-8 (repaired
// by encode), and spellings of common special tokens.
constexpr std::string_view kText =
    "Hello world! It's 2024: 3.14 x 1,000.\n\tdef f(x):  return x*2  # \xc3\xbc" "n\xc3\xaf" "c\xc3\xb6" "de "
    "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 \xff\xfe <s></s><|endoftext|><|im_start|>user [INST] \xe2\x96\x81x  ";

const baton::fuzz::ScratchDir& scratch() {
  static const baton::fuzz::ScratchDir dir;
  static const bool config_written = (dir.write("tokenizer_config.json", "{}"), true);
  (void)config_written;
  return dir;
}

void check_decode(const baton::Tokenizer& tok, const std::vector<std::int32_t>& ids, bool skip_special) {
  const std::string text = tok.decode(ids, skip_special);
  FUZZ_CHECK(baton::fuzz::valid_utf8(text));
  baton::DecodeStream stream(tok, skip_special);
  std::string streamed;
  for (std::int32_t id : ids) streamed += stream.step(id);
  streamed += stream.flush();
  FUZZ_CHECK(streamed == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInputBytes) return 0;
  const baton::fuzz::ScratchDir& dir = scratch();
  dir.write("tokenizer.json", std::string_view(reinterpret_cast<const char*>(data), size));
  auto loaded = baton::Tokenizer::load(dir.path());
  if (!loaded.ok()) return 0;
  const baton::Tokenizer& tok = **loaded;
  std::vector<std::int32_t> ids = tok.encode(kText, /*add_special_tokens=*/true);
  const std::vector<std::int32_t> plain = tok.encode(kText, /*add_special_tokens=*/false);
  ids.insert(ids.end(), plain.begin(), plain.end());
  for (std::int32_t id : {-1, 0, 1, 2, 3, tok.vocab_size() - 1, tok.vocab_size(), std::numeric_limits<std::int32_t>::max()}) {
    ids.push_back(id);
    if (auto token = tok.id_to_token(id)) (void)tok.token_to_id(*token);
  }
  check_decode(tok, ids, /*skip_special=*/false);
  check_decode(tok, ids, /*skip_special=*/true);
  (void)tok.bos_token_id();
  (void)tok.eos_token_ids();
  return 0;
}
