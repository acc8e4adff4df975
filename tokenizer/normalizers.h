// Normalizers of tokenizer.json ("normalizer"): the text rewrites applied to every stretch of input
// between added tokens before pre-tokenization. Supported: Sequence, NFC, NFD, NFKC, NFKD,
// Lowercase, Replace (String or Regex pattern), Prepend, Strip.
//
// Must not: track offsets (Baton needs ids, not alignments), or accept a type it does not know:
// make_normalizer fails with the type's name and JSON path instead of skipping it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place.
  virtual void normalize(std::string& text) const = 0;
};

// `where` is the JSON path of `config`, for error messages (e.g. "tokenizer.json: normalizer").
absl::StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config,
                                                            const std::string& where);

}  // namespace baton
