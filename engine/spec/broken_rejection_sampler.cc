#include "engine/spec/broken_rejection_sampler.h"

#include <algorithm>
#include <cstddef>

namespace baton {
namespace {

// Lowest id on ties, as the correct greedy rule.
std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

VerifyResult verify_broken_for_testing(const VerifyInput& in, const VerifyRandomness& random) {
  const auto vocab = static_cast<std::size_t>(in.vocab_size);
  const std::size_t k = in.drafts.size();
  const auto row = [&](std::size_t i) { return in.target_probs.subspan(i * vocab, vocab); };
  if (in.greedy) {
    for (std::size_t i = 0; i < k; ++i) {
      const std::int32_t best = argmax(row(i));
      if (i > 0 && in.drafts[i] != best) return VerifyResult{static_cast<std::int32_t>(i), best};  // fault: i == 0
    }
    return VerifyResult{static_cast<std::int32_t>(k), argmax(row(k))};
  }
  RandomStream rng = verify_stream(random);
  for (std::size_t i = 0; i < k; ++i) {
    const auto x = static_cast<std::size_t>(in.drafts[i]);
    const double px = row(i)[x];
    const double qx = in.draft_probs.empty() ? 1.0 : static_cast<double>(in.draft_probs[i * vocab + x]);
    if (qx > 0.0 && rng.uniform() <= 2.0 * px / qx) continue;             // fault: too eager
    return VerifyResult{static_cast<std::int32_t>(i), Sampler::draw(row(i), rng)};  // fault: p, not the residual
  }
  return VerifyResult{static_cast<std::int32_t>(k), Sampler::draw(row(k), rng)};
}

}  // namespace baton
