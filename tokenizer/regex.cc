#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "common/status.h"
#include "tokenizer/json_fields.h"

namespace baton {

namespace {

// Oniguruma's Unicode \s: White_Space = \t..\r, space, NEL and the Z categories.
constexpr std::string_view kSpaceClassBody = "\\t-\\r\\x{20}\\x{85}\\p{Z}";
// Oniguruma's Unicode \w: letters, marks, decimal digits, connector punctuation.
constexpr std::string_view kWordClassBody = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";

struct ThreadScratch {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ThreadScratch() {
    match_data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      std::string_view body = (e == 's' || e == 'S') ? kSpaceClassBody
                              : (e == 'w' || e == 'W') ? kWordClassBody
                                                       : std::string_view();
      if (body.empty()) {
        out.push_back('\\');
        out.push_back(e);
        continue;
      }
      bool negated = (e == 'S' || e == 'W');
      if (!in_class) {
        out.append(negated ? "[^" : "[").append(body).append("]");
      } else if (!negated) {
        out.append(body);
      } else {
        // A negated class cannot be inlined inside another class; PCRE2's own \S/\W is the
        // closest (it differs from Oniguruma only on U+0085 / marks).
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

std::string Regex::escape(std::string_view literal) {
  std::string out = "\\Q";
  std::size_t pos = 0;
  while (true) {
    std::size_t e = literal.find("\\E", pos);
    if (e == std::string_view::npos) {
      out.append(literal.substr(pos));
      break;
    }
    out.append(literal.substr(pos, e - pos)).append("\\E\\\\E\\Q");
    pos = e + 2;
  }
  out.append("\\E");
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::compile(std::string_view pattern) {
  std::string translated = translate_oniguruma_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(str_cat("regex /", pattern, "/ does not compile (as PCRE2 /", translated,
                                              "/ at offset ", offset, "): ",
                                              reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  std::unique_ptr<Regex> regex(new Regex());
  regex->code_ = code;
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<RegexMatch>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, s.match_data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    BATON_CHECK(rc >= 0, "PCRE2 match failed with code ", rc, " on ", text.size(), " bytes");
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.match_data);
    std::size_t b = ovector[0], e = ovector[1];
    out.push_back({b, e});
    if (e > b) {
      start = e;
    } else {
      if (e >= text.size()) return;
      start = e + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

absl::Status parse_pattern(const nlohmann::json& config, const std::string& where, std::string& literal,
                           std::unique_ptr<Regex>& regex) {
  auto it = config.find("pattern");
  if (it == config.end() || !it->is_object()) {
    return absl::InvalidArgumentError(str_cat(where, ".pattern: expected {\"String\": ...} or {\"Regex\": ...}"));
  }
  if (it->contains("String")) {
    BATON_ASSIGN_OR_RETURN(literal, json_fields::get_string(*it, where + ".pattern", "String"));
    return absl::OkStatus();
  }
  if (it->contains("Regex")) {
    BATON_ASSIGN_OR_RETURN(std::string pattern, json_fields::get_string(*it, where + ".pattern", "Regex"));
    auto compiled = Regex::compile(pattern);
    if (!compiled.ok()) return absl::InvalidArgumentError(str_cat(where, ".pattern: ", compiled.status().message()));
    regex = std::move(compiled).value();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(str_cat(where, ".pattern: expected {\"String\": ...} or {\"Regex\": ...}, got ",
                                            it->dump()));
}

}  // namespace baton
