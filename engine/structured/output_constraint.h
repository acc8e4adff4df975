// OutputConstraint: one request's constrained output (response_format). It follows the request's
// output with a GrammarMatcher and gives the token mask of the row that decides the next token, and
// of each row a verification reads: row i of a step with drafts d0..dk-1 is masked as after d0..di-1
// (a draft the grammar refuses gets probability 0 there and is rejected; rows after it are never
// reached, and reuse the last mask so that every row stays a distribution). Sampling and
// verification therefore apply the same mask to the same position, which keeps speculation exact
// for the constrained distribution.
//
// Must not: change the output (the engine appends tokens, then advance()s), or hold the masker's
// vocabulary (shared by every request).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/structured/grammar.h"
#include "engine/structured/token_mask.h"

namespace baton::structured {

class OutputConstraint {
 public:
  // vocab: the model's rows' length (at least the masker's vocabulary; ids past it are never allowed).
  OutputConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenMasker> masker, std::size_t vocab);

  // The output grew by `token`: an end token ends it; any other must continue the grammar
  // (Internal otherwise: the mask was not applied).
  absl::Status advance(std::int32_t token);
  // allowed[id] for the next token.
  std::span<const std::uint8_t> mask();
  // Masks of rows 0..drafts.size() of a verification (see the header comment). Valid until the
  // next call.
  const std::vector<std::vector<std::uint8_t>>& masks_along(std::span<const std::int32_t> drafts);

 private:
  // masker_->allowed() for `m`, over vocab_ ids.
  void fill(const GrammarMatcher& m, std::vector<std::uint8_t>& mask) const;

  std::shared_ptr<const TokenMasker> masker_;
  std::size_t vocab_;
  GrammarMatcher matcher_;
  bool ended_ = false;
  bool mask_fresh_ = false;
  std::vector<std::uint8_t> mask_;
  std::vector<std::vector<std::uint8_t>> rows_;
};

}  // namespace baton::structured
