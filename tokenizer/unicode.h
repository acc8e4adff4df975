// UTF-8 and Unicode primitives the tokenizer pipeline is built on: decoding and encoding code
// points, the GPT-2 byte-to-character table, Rust-compatible lossy UTF-8 repair, character classes
// with the exact definitions Hugging Face `tokenizers` uses, and NFC/NFD/NFKC/NFKD through ICU.
//
// Must not: hold tokenizer state, or hand-roll Unicode tables that ICU provides.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace baton::unicode {

constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point starting at s[pos] (s must be valid UTF-8) and advances pos past it.
char32_t next_code_point(std::string_view s, std::size_t& pos);
// Byte length of the UTF-8 sequence whose lead byte is `lead` (1 for continuation bytes).
inline std::size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? (lead < 0xC0 ? 1 : 2) : lead < 0xF0 ? 3 : 4;
}
void append_utf8(std::string& out, char32_t cp);

// True when s is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);
// Replaces every ill-formed subsequence of `bytes` with U+FFFD exactly like Rust's
// String::from_utf8_lossy (one U+FFFD per maximal invalid prefix), which HF decoders use.
std::string utf8_lossy(std::string_view bytes);
// How many bytes at the end of `bytes` form an incomplete, so far valid, UTF-8 sequence (0..3).
std::size_t incomplete_utf8_suffix(std::string_view bytes);

// GPT-2's reversible byte <-> printable character map used by the ByteLevel pre-tokenizer/decoder.
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its stand-in character
  std::array<std::int16_t, 0x144> char_to_byte;  // stand-in code point -> byte, -1 when none
};
const ByteLevelTable& byte_level_table();

// Rust char::is_whitespace (Unicode White_Space); also Oniguruma's Unicode \s.
bool is_whitespace(char32_t cp);
// Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, join controls.
bool is_word_char(char32_t cp);
bool is_alphanumeric(char32_t cp);  // Rust char::is_alphanumeric: Alphabetic or Numeric
bool is_punctuation(char32_t cp);   // general category P*
bool is_numeric(char32_t cp);       // Rust char::is_numeric: general category N*

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
// Normalizes valid UTF-8 `in` into `out`. ASCII input is returned unchanged without calling ICU.
void normalize(NormalForm form, std::string_view in, std::string& out);
// Unicode full lowercase mapping with final-sigma context (as Rust str::to_lowercase).
std::string to_lower(std::string_view s);

}  // namespace baton::unicode
