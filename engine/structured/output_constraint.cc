#include "engine/structured/output_constraint.h"

#include "common/status.h"

namespace baton::structured {

OutputConstraint::OutputConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenMasker> masker,
                                   std::size_t vocab)
    : masker_(std::move(masker)), vocab_(vocab), matcher_(std::move(grammar)) {}

void OutputConstraint::fill(const GrammarMatcher& m, std::vector<std::uint8_t>& mask) const {
  masker_->allowed(m, mask);
  mask.resize(vocab_, 0);
}

absl::Status OutputConstraint::advance(std::int32_t token) {
  mask_fresh_ = false;
  if (ended_) return absl::InternalError(str_cat("constrained output: token ", token, " after its end"));
  if (masker_->is_end(token)) {
    if (!matcher_.complete()) {
      return absl::InternalError(str_cat("constrained output: end token ", token, " before the output is complete"));
    }
    ended_ = true;
    return absl::OkStatus();
  }
  const std::string& bytes = masker_->bytes(token);
  if (bytes.empty() || !matcher_.accept(bytes)) {
    return absl::InternalError(str_cat("constrained output: token ", token, " does not continue the output",
                                       matcher_.ok() ? "" : " (the grammar is too ambiguous)"));
  }
  return absl::OkStatus();
}

std::span<const std::uint8_t> OutputConstraint::mask() {
  if (!mask_fresh_) {
    fill(matcher_, mask_);
    mask_fresh_ = true;
  }
  return mask_;
}

const std::vector<std::vector<std::uint8_t>>& OutputConstraint::masks_along(std::span<const std::int32_t> drafts) {
  rows_.resize(drafts.size() + 1);
  const std::span<const std::uint8_t> first = mask();
  rows_[0].assign(first.begin(), first.end());
  GrammarMatcher m = matcher_;
  bool live = true;
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    const std::string& bytes = masker_->bytes(drafts[i]);
    const auto d = static_cast<std::size_t>(drafts[i]);
    live = live && d < vocab_ && rows_[i][d] != 0 && !bytes.empty() && m.accept(bytes);
    if (live) {
      fill(m, rows_[i + 1]);
    } else {
      rows_[i + 1] = rows_[i];  // never reached: the draft before it is rejected
    }
  }
  return rows_;
}

}  // namespace baton::structured
