// The regular expressions of tokenizer.json (Split pre-tokenizers, Replace normalizers/decoders),
// compiled once with PCRE2 in UTF + UCP mode and JIT-matched.
//
// Hugging Face `tokenizers` compiles these patterns with Oniguruma, whose Unicode \s, \S, \w and \W
// differ from PCRE2's (e.g. U+0085 is \s for Oniguruma only); the translation here rewrites those
// escapes into explicit classes so both engines accept the same characters.
//
// Must not: be used on text that is not valid UTF-8 (callers validate once per request), or keep
// per-call state in the Regex object (matching is thread-safe; scratch space is thread-local).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton {

struct RegexMatch {
  std::size_t begin, end;  // byte offsets
};

class Regex {
 public:
  // `pattern` in Oniguruma/HF syntax. Errors name the pattern and PCRE2's message and offset.
  static absl::StatusOr<std::unique_ptr<Regex>> compile(std::string_view pattern);
  // A pattern that matches `literal` exactly.
  static std::string escape(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-overlapping match of `text`, left to right; an empty match advances by one
  // character (as Oniguruma's find_iter does).
  void find_all(std::string_view text, std::vector<RegexMatch>& out) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Reads the "pattern" field of a Split/Replace config: {"String": literal} sets `literal`,
// {"Regex": pattern} sets `regex`. `where` is the JSON path of `config`.
absl::Status parse_pattern(const nlohmann::json& config, const std::string& where, std::string& literal,
                           std::unique_ptr<Regex>& regex);

// Exposed for tests: the PCRE2 pattern `compile` builds from an Oniguruma one.
std::string translate_oniguruma_pattern(std::string_view pattern);

}  // namespace baton
