// The public Tokenizer API on small hand-written tokenizer.json files: BPE merge order (short and
// long words), byte fallback and unk fusing, ignore_merges, added-token flags, post-processing,
// load errors that name the unsupported feature, special-token ids, streaming decode (linear over
// skipped specials) and concurrent use.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <thread>

#include "nlohmann/json.hpp"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace baton {
namespace {

using nlohmann::json;
using Ids = std::vector<std::int32_t>;

// Temporary directories this test process made, removed when it exits.
struct TempDirs {
  std::vector<std::filesystem::path> dirs;
  ~TempDirs() {
    std::error_code ignored;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ignored);
  }
};

// Writes tokenizer.json (+ tokenizer_config.json) into a fresh temporary directory.
std::string write_tokenizer(const json& tokenizer, const json& config = json::object()) {
  static int counter = 0;
  static TempDirs temp_dirs;
  auto dir = std::filesystem::temp_directory_path() /
             ("baton-tokenizer-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  temp_dirs.dirs.push_back(dir);
  testing::write_file((dir / "tokenizer.json").string(), tokenizer.dump());
  testing::write_file((dir / "tokenizer_config.json").string(), config.dump());
  return dir.string();
}

json bpe(json vocab, json merges, json extra = json::object()) {
  json model = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  for (auto& [k, v] : extra.items()) model[k] = v;
  return {{"model", model}, {"added_tokens", json::array()}};
}

std::unique_ptr<Tokenizer> load(const json& tokenizer, const json& config = json::object()) {
  auto t = Tokenizer::load(write_tokenizer(tokenizer, config));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(Bpe, LowestRankFirstThenLeftmost) {
  auto t = load(bpe({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}},
                    {"b c", "a b", "a bc", "a a"}));
  EXPECT_EQ(t->encode("abc", false), Ids{5});     // b c (rank 0) before a b (rank 1)
  EXPECT_EQ(t->encode("aaa", false), (Ids{6, 0}));  // ties go left
}

TEST(Bpe, LongWordsMergeLikeShortOnes) {
  auto t = load(bpe({{"a", 0}, {"aa", 1}, {"aaaa", 2}}, {"a a", "aa aa"}));
  EXPECT_EQ(t->encode(std::string(20, 'a'), false), (Ids{2, 2, 2, 2, 2}));     // scan path
  EXPECT_EQ(t->encode(std::string(30, 'a'), false), (Ids{2, 2, 2, 2, 2, 2, 2, 1}));  // heap path
}

TEST(Bpe, ByteFallbackAndFusedUnknowns) {
  json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  auto t = load(bpe(vocab, json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}}));
  EXPECT_EQ(t->encode("a\xC3\xA9" "a", false), (Ids{1, 2, 3, 1}));  // é has its bytes
  EXPECT_EQ(t->encode("a\xE2\x82\xAC\xE2\x82\xAC" "a", false), (Ids{1, 0, 1}));  // €€: no bytes, one fused unk
  auto unfused = load(bpe(vocab, json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", false}}));
  EXPECT_EQ(unfused->encode("\xE2\x82\xAC\xE2\x82\xAC", false), (Ids{0, 0}));
}

TEST(Bpe, IgnoreMergesTakesWholeWords) {
  json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"abb", 3}};
  EXPECT_EQ(load(bpe(vocab, {"a b"}))->encode("abb", false), (Ids{2, 1}));
  EXPECT_EQ(load(bpe(vocab, {"a b"}, {{"ignore_merges", true}}))->encode("abb", false), Ids{3});
}

TEST(AddedTokens, FlagsAndPostProcessor) {
  json t = bpe({{"a", 0}, {"b", 1}, {" ", 2}}, json::array());
  t["added_tokens"] = {
      {{"id", 3}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 4}, {"content", "<m>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}},
      {{"id", 5}, {"content", "ab"}, {"special", false}, {"single_word", true}, {"normalized", false}}};
  t["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {3}}, {"tokens", {"<s>"}}}}}}};
  auto tok = load(t);
  EXPECT_EQ(tok->encode("a <m> b", false), (Ids{0, 4, 1}));   // spaces around <m> are absorbed
  EXPECT_EQ(tok->encode("ab aab", false), (Ids{5, 2, 0, 0, 1}));  // "ab" only as a whole word
  EXPECT_EQ(tok->encode("a", true), (Ids{3, 0}));
  EXPECT_EQ(tok->decode(Ids{3, 0, 4, 1}, false), "<s> a <m> b");  // no decoder: tokens joined by spaces
  EXPECT_EQ(tok->decode(Ids{3, 0, 4, 1}, true), "a b");
  EXPECT_EQ(tok->vocab_size(), 6);
  EXPECT_EQ(tok->token_to_id("<m>"), 4);
  EXPECT_EQ(tok->token_to_id("zz"), std::nullopt);
}

TEST(Load, UnsupportedFeaturesAreNamed) {
  json wordpiece = {{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}};
  auto t = Tokenizer::load(write_tokenizer(wordpiece));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("WordPiece"), std::string_view::npos) << t.status();

  json pre = bpe({{"a", 0}}, json::array());
  pre["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  t = Tokenizer::load(write_tokenizer(pre));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("BertPreTokenizer"), std::string_view::npos) << t.status();
  EXPECT_NE(t.status().message().find("pre_tokenizer"), std::string_view::npos) << t.status();

  t = Tokenizer::load(write_tokenizer(bpe({{"a", 0}}, json::array(), {{"dropout", 0.1}})));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("dropout"), std::string_view::npos) << t.status();

  t = Tokenizer::load(write_tokenizer(bpe({{"a", 0}}, {"a b"})));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("merges[0]"), std::string_view::npos) << t.status();

  t = Tokenizer::load("/nonexistent/model");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.json"), std::string_view::npos) << t.status();
  EXPECT_FALSE(Tokenizer::has_tokenizer_files("/nonexistent/model"));

  t = Tokenizer::load(write_tokenizer(bpe({{"a", 0}}, json::array()), {{"chat_template", "{% include 'x' %}"}}));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("include"), std::string_view::npos) << t.status();
}

TEST(Config, SpecialTokenIdsAndChatTemplate) {
  json t = bpe({{"<s>", 0}, {"</s>", 1}, {"a", 2}}, json::array());
  json config = {{"bos_token", {{"content", "<s>"}, {"__type", "AddedToken"}}}, {"eos_token", "</s>"},
                 {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
                                   "{% if add_generation_prompt %}assistant:{% endif %}"}};
  auto tok = load(t, config);
  EXPECT_EQ(tok->bos_token_id(), 0);
  EXPECT_EQ(tok->eos_token_ids(), Ids{1});
  auto text = tok->apply_chat_template(json::parse(R"([{"role":"user","content":"hi"}])"), true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<s>user:hi;assistant:");
  EXPECT_FALSE(tok->apply_chat_template(json::parse(R"({"role":"user"})"), true).ok());

  auto plain = load(t);
  EXPECT_EQ(plain->bos_token_id(), std::nullopt);
  EXPECT_TRUE(plain->eos_token_ids().empty());
  auto missing = plain->apply_chat_template(json::array(), true);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("chat_template"), std::string_view::npos);
}

// A list of named chat templates: entries whose name is not a string are skipped, not thrown on.
TEST(Config, NamedChatTemplatesWithOddNamesAreSkipped) {
  json t = bpe({{"<s>", 0}, {"a", 1}}, json::array());
  json config = {{"chat_template", json::array({{{"name", 5}, {"template", "x"}},
                                                {{"name", "default"}, {"template", "{{ 'y' }}"}}})}};
  auto tok = Tokenizer::load(write_tokenizer(t, config));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto text = (*tok)->apply_chat_template(json::array(), false);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "y");
  config["chat_template"] = json::array({{{"name", json::array()}, {"template", "x"}}});
  auto none = Tokenizer::load(write_tokenizer(t, config));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("without a \"default\" entry"), std::string_view::npos) << none.status();
}

// Byte-level tokenizer whose vocab holds only single bytes: every byte is its own token.
std::unique_ptr<Tokenizer> byte_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = b;
  }
  json t = bpe(vocab, json::array(), {{"byte_fallback", true}});
  t["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  return load(t);
}

TEST(DecodeStream, HoldsByteRunsUntilTheyEnd) {
  auto tok = byte_tokenizer();
  const std::string text = "a\xE4\xBD\xA0\xF0\x9F\x98\x80" "b";  // a 你 😀 b
  Ids ids = tok->encode(text, false);
  ASSERT_EQ(ids.size(), text.size());
  DecodeStream stream(*tok, false);
  std::vector<std::string> pieces;
  for (std::int32_t id : ids) pieces.push_back(stream.step(id));
  pieces.push_back(stream.flush());
  // Byte runs are judged whole by ByteFallback, so nothing is final before the run ends.
  EXPECT_EQ(pieces, (std::vector<std::string>{"", "", "", "", "", "", "", "", "", "a\xE4\xBD\xA0\xF0\x9F\x98\x80" "b"}));
}

TEST(DecodeStream, FlushEmitsAnIncompleteTail) {
  auto tok = byte_tokenizer();
  DecodeStream stream(*tok, false);
  std::string out = stream.step(0x61);
  out += stream.step(0xE4);
  EXPECT_EQ(out, "");
  out += stream.flush();
  EXPECT_EQ(out, tok->decode(Ids{0x61, 0xE4}, false));
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD");  // an invalid run: one U+FFFD per byte
}

// Byte-level (GPT-2 style) tokenizer: one token per byte, as stand-in characters.
std::unique_ptr<Tokenizer> byte_level_tokenizer() {
  json vocab = json::object();
  const unsigned char bytes[] = {0x61, 0xE4, 0xBD, 0xA0};
  for (int i = 0; i < 4; ++i) vocab[unicode::byte_level_table().byte_to_utf8[bytes[i]]] = i;
  json t = bpe(vocab, json::array());
  t["decoder"] = {{"type", "ByteLevel"}};
  return load(t);
}

TEST(DecodeStream, NeverSplitsACharacter) {
  auto tok = byte_level_tokenizer();
  DecodeStream stream(*tok, false);
  std::vector<std::string> pieces;
  for (std::int32_t id : Ids{0, 1, 2, 3, 0}) pieces.push_back(stream.step(id));
  pieces.push_back(stream.flush());
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "", "\xE4\xBD\xA0", "a", ""}));
}

// Tokens that decoding drops (here EOS after EOS, as a model emits under ignore_eos) are not kept
// to be decoded again with every later token: the window stays small, so streaming is linear.
TEST(DecodeStream, SkippedSpecialsDoNotAccumulate) {
  auto tok = Tokenizer::load(testing::bundled_tokenizer_dir().path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto eos = (*tok)->token_to_id("<|endoftext|>");
  ASSERT_TRUE(eos.has_value());
  Ids ids = (*tok)->encode("def f(x):", false);
  ids.insert(ids.end(), 20000, *eos);
  const Ids tail = (*tok)->encode("\n    return x", false);
  ids.insert(ids.end(), tail.begin(), tail.end());
  DecodeStream stream(**tok, /*skip_special_tokens=*/true);
  std::string joined;
  std::size_t widest = 0;
  for (std::int32_t id : ids) {
    joined += stream.step(id);
    widest = std::max(widest, stream.window_size());
  }
  joined += stream.flush();
  EXPECT_EQ(joined, "def f(x):\n    return x");
  EXPECT_LE(widest, 4u);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  auto dirs = testing::fixture_tokenizer_dirs();
  ASSERT_FALSE(dirs.empty());
  auto tok = Tokenizer::load(dirs[1].path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string corpus = testing::read_file(testing::source_dir() + "/tests/tokenizer/corpus.txt");
  Ids expected = (*tok)->encode(corpus, true);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < 5; ++r) results[i] = (*tok)->encode(corpus, true);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

TEST(Tokenizer, InvalidUtf8IsRepaired) {
  auto tok = byte_tokenizer();
  EXPECT_EQ(tok->encode("a\xFF", false), tok->encode("a\xEF\xBF\xBD", false));
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

using testing::valid_utf8;

// Random id sequences mixing special tokens, byte-fallback tokens and ordinary ones (what a random
// model generates): the stream's pieces are valid UTF-8 and concatenate to the full decode, with
// and without skipping specials (a skipped special inside a byte run must not end the run).
TEST(DecodeStream, MatchesFullDecodeOnRandomIdsWithSpecials) {
  for (const char* name : {"llama-f32", "qwen3-bf16", "mistral-f16", "llama3-bf16"}) {
    auto tok = Tokenizer::load(std::string(BATON_FIXTURES_DIR) + "/" + name);
    ASSERT_TRUE(tok.ok()) << tok.status();
    std::mt19937 rng(7);
    const auto vocab = static_cast<std::uint32_t>((*tok)->vocab_size());
    for (int trial = 0; trial < 300; ++trial) {
      Ids ids(1 + rng() % 30);
      for (auto& id : ids) id = static_cast<std::int32_t>(rng() % 4 == 0 ? rng() % 8 : rng() % vocab);
      for (bool skip : {true, false}) {
        DecodeStream stream(**tok, skip);
        std::string joined;
        for (std::int32_t id : ids) {
          const std::string piece = stream.step(id);
          ASSERT_TRUE(valid_utf8(piece)) << name << " trial " << trial;
          joined += piece;
        }
        joined += stream.flush();
        EXPECT_EQ(joined, (*tok)->decode(ids, skip)) << name << " trial " << trial << " skip " << skip;
      }
    }
  }
}

// token_bytes(): each token's raw share of a text. Concatenated over a text's ids it gives the
// text back byte for byte (with the space a SentencePiece-style tokenizer puts before the first
// word), also where a byte-level token ends inside a UTF-8 character; special tokens have none.
TEST(TokenBytes, ConcatenatedTheyAreTheTextForEveryTokenizer) {
  std::vector<testing::TokenizerDir> dirs = testing::real_tokenizer_dirs();
  for (const auto& d : testing::fixture_tokenizer_dirs()) dirs.push_back(d);
  dirs.push_back(testing::bundled_tokenizer_dir());
  const std::vector<std::string> texts = {"def add(a, b):\n    return a + b\n", "{\"name\": \"caf\xC3\xA9\", \"n\": [1, 2.5]}",
                                          "  leading and trailing  ", "\xE2\x82\xAC\xF0\x9F\x98\x80 \xE4\xBD\xA0\xE5\xA5\xBD"};
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.name);
    auto tok = Tokenizer::load(dir.path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::vector<std::string> bytes = (*tok)->token_bytes();
    ASSERT_EQ(bytes.size(), static_cast<std::size_t>((*tok)->vocab_size()));
    for (const std::string& text : texts) {
      std::string joined;
      for (std::int32_t id : (*tok)->encode(text, /*add_special_tokens=*/false)) joined += bytes[static_cast<std::size_t>(id)];
      EXPECT_TRUE(joined == text || joined == " " + text) << text << " -> " << joined;
    }
    for (std::int32_t eos : (*tok)->eos_token_ids()) EXPECT_TRUE(bytes[static_cast<std::size_t>(eos)].empty()) << eos;
  }
}

}  // namespace
}  // namespace baton
