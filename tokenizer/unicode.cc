#include "tokenizer/unicode.h"

#include <cstring>

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "common/status.h"

namespace baton::unicode {

char32_t next_code_point(std::string_view s, std::size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  unsigned char c = p[0];
  if (c < 0x80) {
    pos += 1;
    return c;
  }
  if (c < 0xE0) {
    pos += 2;
    return (char32_t(c & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (c < 0xF0) {
    pos += 3;
    return (char32_t(c & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  pos += 4;
  return (char32_t(c & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid UTF-8 sequence at s[pos], or -k when only the first k bytes form a valid
// prefix of a sequence (k >= 1; k bytes are then one ill-formed subsequence, or an incomplete
// tail when they run to the end of s). Follows the Unicode "maximal subpart" rule, as Rust does.
int valid_sequence_length(std::string_view s, std::size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  unsigned char c = p[pos];
  if (c < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int i = 1; i <= need; ++i) {
    if (pos + i >= n) return -i;
    unsigned char b = p[pos + i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -i;
  }
  return need + 1;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= s.size()) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + pos, 8);
      if (w & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= s.size()) break;
    int len = valid_sequence_length(s, pos);
    if (len < 0) return false;
    pos += len;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    int len = valid_sequence_length(bytes, pos);
    if (len > 0) {
      out.append(bytes.substr(pos, len));
      pos += len;
    } else {
      append_utf8(out, kReplacementChar);
      pos += -len;
    }
  }
  return out;
}

std::size_t incomplete_utf8_suffix(std::string_view bytes) {
  // Only the last 3 bytes can start an incomplete sequence.
  std::size_t start = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (std::size_t pos = start; pos < bytes.size(); ++pos) {
    auto c = static_cast<unsigned char>(bytes[pos]);
    if (c < 0xC0) continue;  // ASCII or continuation: cannot start a sequence
    int len = valid_sequence_length(bytes, pos);
    if (len < 0 && pos + static_cast<std::size_t>(-len) == bytes.size()) return bytes.size() - pos;
  }
  return 0;
}

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table = [] {
    ByteLevelTable t;
    t.char_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? char32_t(b) : char32_t(256 + extra++);
      append_utf8(t.byte_to_utf8[b], cp);
      t.char_to_byte[cp] = static_cast<std::int16_t>(b);
    }
    return t;
  }();
  return table;
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE);
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  }
  auto c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
  std::int32_t mask = U_GET_GC_MASK(c);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool is_alphanumeric(char32_t cp) {
  auto c = static_cast<UChar32>(cp);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0;
}

bool is_numeric(char32_t cp) { return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0; }

bool is_punctuation(char32_t cp) { return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0; }

namespace {
const icu::Normalizer2& normalizer_for(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  BATON_CHECK(U_SUCCESS(status) && n != nullptr, "ICU normalizer unavailable: ", u_errorName(status));
  return *n;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}
}  // namespace

void normalize(NormalForm form, std::string_view in, std::string& out) {
  out.clear();
  if (is_ascii(in)) {
    out.append(in);
    return;
  }
  const icu::Normalizer2& n = normalizer_for(form);
  UErrorCode status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(in.size()));
  n.normalizeUTF8(0, icu::StringPiece(in.data(), static_cast<int32_t>(in.size())), sink, nullptr, status);
  BATON_CHECK(U_SUCCESS(status), "ICU normalization failed: ", u_errorName(status));
}

std::string to_lower(std::string_view s) {
  std::string out;
  if (is_ascii(s)) {
    out.reserve(s.size());
    for (char c : s) out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return out;
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.toLower(icu::Locale::getRoot());
  u.toUTF8String(out);
  return out;
}

}  // namespace baton::unicode
