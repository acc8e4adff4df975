#include "tokenizer/chat_template_strings.h"

#include <algorithm>
#include <cstdint>

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "common/status.h"
#include "tokenizer/chat_template_limits.h"
#include "tokenizer/unicode.h"

namespace baton::jinja {

namespace {

char32_t decode_one(std::string_view s) {
  std::size_t pos = 0;
  return unicode::next_code_point(s, pos);
}

// Python str.isspace(): Unicode White_Space plus the information separators U+001C..U+001F.
bool python_isspace(char32_t cp) { return unicode::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string icu_map(std::string_view s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  if (upper) {
    u.toUpper(icu::Locale::getRoot());
  } else {
    u.toLower(icu::Locale::getRoot());
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

const std::string& require_string(const Value& v, const char* what) {
  if (!v.is_string()) throw TemplateError(str_cat(what, ": expected a string, got ", v.type_name()));
  return v.as_string();
}

}  // namespace

std::vector<std::string> code_points(std::string_view s) {
  // One std::string per code point costs several times a byte copied: charged as 8 bytes each.
  RenderBudget::text(std::uint64_t{8} * s.size());
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t start = pos;
    unicode::next_code_point(s, pos);
    out.emplace_back(s.substr(start, pos - start));
  }
  return out;
}

std::size_t find_text(std::string_view haystack, std::string_view needle, std::size_t from) {
  if (from > haystack.size()) return std::string_view::npos;
  // Short needles (all that real templates search for): the library's search, at most
  // needle-size steps per byte.
  if (needle.size() <= 64) return haystack.find(needle, from);
  if (needle.size() > haystack.size() - from) return std::string_view::npos;
  // Knuth-Morris-Pratt: linear in both (libstdc++'s boyer_moore_searcher prepares in
  // needle-squared time for a needle like 'aa...ab').
  RenderBudget::text(needle.size());
  std::vector<std::uint32_t> border(needle.size() + 1, 0);  // needles are < kMaxStringBytes < 2^32
  for (std::size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = border[k];
    if (needle[i] == needle[k]) ++k;
    border[i + 1] = static_cast<std::uint32_t>(k);
  }
  for (std::size_t i = from, k = 0; i < haystack.size(); ++i) {
    while (k > 0 && haystack[i] != needle[k]) k = border[k];
    if (haystack[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - k;
  }
  return std::string_view::npos;
}

std::string python_strip(std::string_view s, const Value& chars, bool left, bool right) {
  // Walks code points from either end (no per-character split: trim runs on every message).
  RenderBudget::text(s.size());
  std::vector<char32_t> set;
  bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    const std::string& c = require_string(chars, "strip");
    for (std::size_t pos = 0; pos < c.size();) set.push_back(unicode::next_code_point(c, pos));
  }
  auto strippable = [&](char32_t cp) {
    if (whitespace) return python_isspace(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  std::size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      std::size_t next = begin;
      if (!strippable(unicode::next_code_point(s, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (!strippable(decode_one(s.substr(start, end - start)))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::string python_upper(std::string_view s) { return icu_map(s, true); }
std::string python_lower(std::string_view s) { return icu_map(s, false); }

std::string python_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (const auto& cp : code_points(s)) {
    char32_t c = decode_one(cp);
    bool cased = u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
    out += !cased ? cp : previous_cased ? python_lower(cp) : python_upper(cp);
    previous_cased = cased;
  }
  return out;
}

std::string python_capitalize(std::string_view s) {
  std::vector<std::string> cps = code_points(s);
  std::string out;
  for (std::size_t i = 0; i < cps.size(); ++i) out += i == 0 ? python_upper(cps[i]) : python_lower(cps[i]);
  return out;
}

std::string python_replace(std::string_view s, std::string_view old_text, std::string_view new_text, long long count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` between every character (and at both ends).
    std::vector<std::string> cps = code_points(s);
    std::size_t inserts = count < 0 ? cps.size() + 1 : std::min<std::size_t>(cps.size() + 1, static_cast<std::size_t>(count));
    if (!new_text.empty() && inserts > (kMaxStringBytes - std::min(kMaxStringBytes, s.size())) / new_text.size()) {
      throw TemplateError(str_cat("replace: ", inserts, " insertions of ", new_text.size(), " bytes are over the limit of ",
                                  kMaxStringBytes, " bytes"));
    }
    long long done = 0;
    for (std::size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  std::size_t prev = 0;
  long long done = 0;
  RenderBudget::text(s.size());
  for (std::size_t pos = find_text(s, old_text, 0); pos != std::string_view::npos && (count < 0 || done < count);
       pos = find_text(s, old_text, prev)) {
    check_string_size(out.size() + (pos - prev) + new_text.size(), "replace");
    out.append(s.substr(prev, pos - prev)).append(new_text);
    prev = pos + old_text.size();
    ++done;
  }
  out.append(s.substr(prev));
  return out;
}

std::vector<std::string> python_split(std::string_view s, const Value& sep, long long maxsplit) {
  std::vector<std::string> parts;
  if (sep.is_undefined() || sep.is_none()) {
    std::vector<std::string> cps = code_points(s);
    std::size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && python_isspace(decode_one(cps[i]))) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<long long>(parts.size()) == maxsplit) {
        std::string rest;
        for (std::size_t k = i; k < cps.size(); ++k) rest += cps[k];
        parts.push_back(rest);
        return parts;
      }
      std::string word;
      while (i < cps.size() && !python_isspace(decode_one(cps[i]))) word += cps[i++];
      parts.push_back(word);
    }
    return parts;
  }
  const std::string& separator = require_string(sep, "split");
  if (separator.empty()) throw TemplateError("split: empty separator");
  std::size_t prev = 0;
  RenderBudget::text(s.size());
  for (std::size_t pos = find_text(s, separator, 0); pos != std::string_view::npos; pos = find_text(s, separator, prev)) {
    if (maxsplit >= 0 && static_cast<long long>(parts.size()) == maxsplit) break;
    parts.emplace_back(s.substr(prev, pos - prev));
    prev = pos + separator.size();
  }
  parts.emplace_back(s.substr(prev));
  return parts;
}

Value call_string_method(const std::string& s, const std::string& name, const CallArgs& args) {
  auto list_of = [](const std::vector<std::string>& parts) {
    Value::List items;
    for (const auto& p : parts) items.push_back(Value::string(p));
    return Value::list(std::move(items));
  };
  if (name == "strip") return Value::string(python_strip(s, args.get(0, "chars"), true, true));
  if (name == "lstrip") return Value::string(python_strip(s, args.get(0, "chars"), true, false));
  if (name == "rstrip") return Value::string(python_strip(s, args.get(0, "chars"), false, true));
  if (name == "upper") return Value::string(python_upper(s));
  if (name == "lower") return Value::string(python_lower(s));
  if (name == "title") return Value::string(python_title(s));
  if (name == "capitalize") return Value::string(python_capitalize(s));
  if (name == "split") {
    Value maxsplit = args.get(1, "maxsplit", Value::integer(-1));
    return list_of(python_split(s, args.get(0, "sep"), maxsplit.as_int()));
  }
  if (name == "rsplit") {
    Value maxsplit = args.get(1, "maxsplit", Value::integer(-1));
    if (maxsplit.as_int() >= 0) throw TemplateError("rsplit with maxsplit is not supported");
    return list_of(python_split(s, args.get(0, "sep"), -1));
  }
  if (name == "startswith" || name == "endswith") {
    Value arg = args.get(0, "prefix");
    std::vector<Value> candidates = arg.is_list() ? arg.as_list() : std::vector<Value>{arg};
    for (const auto& c : candidates) {
      const std::string& affix = require_string(c, name.c_str());
      if (name == "startswith" ? s.starts_with(affix) : s.ends_with(affix)) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "replace") {
    Value count = args.get(2, "count", Value::integer(-1));
    return Value::string(python_replace(s, require_string(args.get(0, "old"), "replace"),
                                        require_string(args.get(1, "new"), "replace"), count.as_int()));
  }
  if (name == "find") {
    const std::string& sub = require_string(args.get(0, "sub"), "find");
    RenderBudget::text(s.size());
    std::size_t pos = find_text(s, sub, 0);
    if (pos == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<std::int64_t>(code_points(std::string_view(s).substr(0, pos)).size()));
  }
  if (name == "count") {
    const std::string& sub = require_string(args.get(0, "sub"), "count");
    if (sub.empty()) return Value::integer(static_cast<std::int64_t>(code_points(s).size()) + 1);
    RenderBudget::text(s.size());
    std::int64_t n = 0;
    for (std::size_t pos = find_text(s, sub, 0); pos != std::string::npos; pos = find_text(s, sub, pos + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& item : iterate(args.get(0, "iterable"))) {
      const std::string& piece = require_string(item, "join");
      check_string_size(out.size() + (first ? 0 : s.size()) + piece.size(), "join");
      if (!first) out += s;
      out += piece;
      first = false;
    }
    return Value::string(out);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    std::vector<std::string> cps = code_points(s);
    if (cps.empty()) return Value::boolean(false);
    if (name == "islower" || name == "isupper") {
      bool upper = name == "isupper";
      return Value::boolean((upper ? python_lower(s) : python_upper(s)) != s &&
                            (upper ? python_upper(s) : python_lower(s)) == s);
    }
    for (const auto& cp : cps) {
      auto c = static_cast<UChar32>(decode_one(cp));
      bool ok = name == "isdigit"   ? u_isdigit(c)
                : name == "isalpha" ? u_hasBinaryProperty(c, UCHAR_ALPHABETIC)
                : name == "isalnum" ? (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_isdigit(c))
                                    : python_isspace(static_cast<char32_t>(c));
      if (!ok) return Value::boolean(false);
    }
    return Value::boolean(true);
  }
  throw TemplateError(str_cat("unsupported string method '", name, "'"));
}

}  // namespace baton::jinja
