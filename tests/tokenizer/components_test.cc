// Unit tests of the tokenizer's parts, each against hand-computed expectations: UTF-8 repair,
// the byte-level table, the Oniguruma -> PCRE2 translation, normalizers, pre-tokenizer split
// behaviors, decoders, the BPE merge order, added-token flags and post-processors.
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace baton {
namespace {

using nlohmann::json;

TEST(Unicode, LossyRepairMatchesRust) {
  // One U+FFFD per maximal invalid prefix (Rust's String::from_utf8_lossy).
  EXPECT_EQ(unicode::utf8_lossy("abc"), "abc");
  EXPECT_EQ(unicode::utf8_lossy("a\xE4\xBD"), "a\xEF\xBF\xBD");                    // truncated 3-byte
  EXPECT_EQ(unicode::utf8_lossy("\xE4\xBD" "a"), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(unicode::utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // two invalid bytes
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(unicode::utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");                 // truncated emoji
  EXPECT_TRUE(unicode::is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(unicode::is_valid_utf8("\xC0\xAF"));  // overlong
  EXPECT_EQ(unicode::incomplete_utf8_suffix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(unicode::incomplete_utf8_suffix("ab\xF0\x9F\x98\x80"), 0u);
}

TEST(Unicode, ByteLevelTableIsGpt2s) {
  const auto& t = unicode::byte_level_table();
  EXPECT_EQ(t.byte_to_utf8['A'], "A");
  EXPECT_EQ(t.byte_to_utf8[' '], "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(t.byte_to_utf8['\n'], "\xC4\x8A");  // U+010A 'Ċ'
  for (int b = 0; b < 256; ++b) {
    std::size_t pos = 0;
    char32_t cp = unicode::next_code_point(t.byte_to_utf8[b], pos);
    EXPECT_EQ(t.char_to_byte[cp], b);
  }
}

TEST(Unicode, CharacterClassesFollowRust) {
  EXPECT_TRUE(unicode::is_whitespace(0x85));     // NEL
  EXPECT_TRUE(unicode::is_whitespace(0x3000));   // ideographic space
  EXPECT_FALSE(unicode::is_whitespace(0x180E));  // Mongolian vowel separator is Cf since Unicode 6.3
  EXPECT_FALSE(unicode::is_whitespace(0x200B));  // zero width space
  EXPECT_TRUE(unicode::is_word_char(0x0301));    // combining mark
  EXPECT_TRUE(unicode::is_word_char('_'));
  EXPECT_FALSE(unicode::is_word_char('-'));
}

TEST(Unicode, NormalizationUsesIcu) {
  std::string out;
  unicode::normalize(unicode::NormalForm::kNFC, "e\xCC\x81", out);
  EXPECT_EQ(out, "\xC3\xA9");
  unicode::normalize(unicode::NormalForm::kNFKC, "\xEF\xAC\x81", out);  // ﬁ ligature
  EXPECT_EQ(out, "fi");
  unicode::normalize(unicode::NormalForm::kNFD, "\xC3\xA9", out);
  EXPECT_EQ(out, "e\xCC\x81");
  EXPECT_EQ(unicode::to_lower("\xCE\x9F\xCE\xA3"), "\xCE\xBF\xCF\x82");  // final sigma
}

std::vector<std::string> matches(const std::string& pattern, const std::string& text) {
  auto regex = Regex::compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  std::vector<RegexMatch> found;
  (*regex)->find_all(text, found);
  std::vector<std::string> out;
  for (const auto& m : found) out.push_back(text.substr(m.begin, m.end - m.begin));
  return out;
}

TEST(Regex, OnigurumaSpaceClassIncludesNel) {
  EXPECT_EQ(translate_oniguruma_pattern(R"(\s+)"), R"([\t-\r\x{20}\x{85}\p{Z}]+)");
  EXPECT_EQ(translate_oniguruma_pattern(R"([^\s\p{L}])"), R"([^\t-\r\x{20}\x{85}\p{Z}\p{L}])");
  EXPECT_EQ(translate_oniguruma_pattern(R"(\s+(?!\S))"), R"([\t-\r\x{20}\x{85}\p{Z}]+(?![^\t-\r\x{20}\x{85}\p{Z}]))");
  EXPECT_EQ(matches(R"(\s+)", "a\xC2\x85" "b"), std::vector<std::string>{"\xC2\x85"});
  EXPECT_EQ(matches(R"(\p{N}{1,3})", "12345"), (std::vector<std::string>{"123", "45"}));
  EXPECT_EQ(matches(R"((?i:'s|'t))", "IT'S it's"), (std::vector<std::string>{"'S", "'s"}));
}

TEST(Regex, EmptyMatchesAdvanceOneCharacter) {
  EXPECT_EQ(matches("x*", "a\xC3\xA9"), (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(matches(Regex::escape("a.b\\E"), "xa.b\\Ey"), std::vector<std::string>{"a.b\\E"});
}

TEST(Regex, BadPatternNamesItself) {
  auto regex = Regex::compile("(unclosed");
  ASSERT_FALSE(regex.ok());
  EXPECT_NE(regex.status().message().find("(unclosed"), std::string_view::npos);
}

std::string normalize(const json& config, std::string text) {
  auto n = make_normalizer(config, "test");
  EXPECT_TRUE(n.ok()) << n.status();
  (*n)->normalize(text);
  return text;
}

TEST(Normalizers, EachTypeRewritesAsHuggingFaceDoes) {
  json sp = {{"type", "Sequence"},
             {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  EXPECT_EQ(normalize(sp, "a b"), "\xE2\x96\x81" "a\xE2\x96\x81" "b");
  EXPECT_EQ(normalize(sp, ""), "");  // Prepend leaves empty text alone
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}, "a   b  c"), "a b c");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, "\t a \xE3\x80\x80"),
            "a \xE3\x80\x80");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " a\xE3\x80\x80"), "a");
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "ÄB"), "äb");
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\xEF\xBC\xA1"), "A");  // fullwidth A
}

TEST(Normalizers, UnknownTypeIsAnErrorNamingIt) {
  auto n = make_normalizer({{"type", "Precompiled"}, {"precompiled_charsmap", "xx"}}, "tokenizer.json: normalizer");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(n.status().message().find("Precompiled"), std::string_view::npos);
  EXPECT_NE(n.status().message().find("tokenizer.json: normalizer"), std::string_view::npos);
}

std::vector<std::string> pre_tokenize(const json& config, const std::string& text) {
  auto p = make_pre_tokenizer(config, "test");
  EXPECT_TRUE(p.ok()) << p.status();
  PieceList in, out;
  in.push(text, true);
  (*p)->pre_tokenize(in, out);
  std::vector<std::string> pieces;
  for (const auto& piece : out.pieces()) pieces.emplace_back(out.view(piece));
  return pieces;
}

json split(const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
}

TEST(PreTokenizers, SplitBehaviors) {
  using V = std::vector<std::string>;
  const std::string text = "a-b--c-";
  EXPECT_EQ(pre_tokenize(split("Removed"), text), (V{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize(split("Isolated"), text), (V{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithPrevious"), text), (V{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithNext"), text), (V{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(pre_tokenize(split("Contiguous"), text), (V{"a", "-", "b", "--", "c", "-"}));
  EXPECT_EQ(pre_tokenize(split("Removed", true), text), (V{"-", "-", "-", "-"}));  // each match kept alone
}

TEST(PreTokenizers, ByteLevelMetaspaceDigits) {
  using V = std::vector<std::string>;
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pre_tokenize(byte_level, "Hi you"), (V{"\xC4\xA0Hi", "\xC4\xA0you"}));
  json metaspace = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "first"}, {"split", true}};
  EXPECT_EQ(pre_tokenize(metaspace, "a b  c"), (V{"_a", "_b", "_", "_c"}));
  json digits = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pre_tokenize(digits, "ab123c4"), (V{"ab", "123", "c", "4"}));
  json whitespace = {{"type", "Whitespace"}};
  EXPECT_EQ(pre_tokenize(whitespace, "Hi, you!"), (V{"Hi", ",", "you", "!"}));
}

std::string decode(const json& config, std::vector<std::string> tokens) {
  auto d = make_decoder(config, "test");
  EXPECT_TRUE(d.ok()) << d.status();
  (*d)->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(Decoders, SentencePieceChain) {
  json chain = {{"type", "Sequence"},
                {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                              {{"type", "ByteFallback"}},
                              {{"type", "Fuse"}},
                              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(decode(chain, {"\xE2\x96\x81Hi", "<0xE4>", "<0xBD>", "<0xA0>", "\xE2\x96\x81x"}), "Hi\xE4\xBD\xA0 x");
  // An invalid byte run becomes one U+FFFD per byte.
  EXPECT_EQ(decode(chain, {"<0xE4>", "<0xBD>", "a"}), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
}

TEST(Decoders, ByteLevelAndMetaspace) {
  // "Ã" (byte 0xC3) + "¤" (byte 0xA4) = "ä"; a token with characters outside the table is raw text.
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"\xC4\xA0Hi", "<|x|>", "\xC3\x83", "\xC2\xA4"}), " Hi<|x|>\xC3\xA4");
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"\xC3\xA4"}), "\xEF\xBF\xBD");  // lone byte 0xE4
  json metaspace = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(decode(metaspace, {"_a_b", "_c"}), "ab c");  // every mark in the first token goes
  json never = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "never"}};
  EXPECT_EQ(decode(never, {"_a", "_c"}), " a c");
}

TEST(Decoders, UnknownTypeIsAnError) {
  auto d = make_decoder({{"type", "WordPiece"}}, "tokenizer.json: decoder");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("WordPiece"), std::string_view::npos);
}

}  // namespace
}  // namespace baton
