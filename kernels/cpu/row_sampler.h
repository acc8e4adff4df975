// The sampling of one row of logits after any history-dependent processing: temperature, top-k,
// top-p, min-p, the fp32 distribution and the inverse-CDF draw, in vLLM's order (docs/engine.md) and
// with engine/sample/sampler.h's semantics (which documents them). Shared by the engine's Sampler
// (which applies penalties and the min_tokens mask first) and CpuBackend::sample_rows(), so both
// give the same distribution and the same token for the same uniform.
//
// Must not: allocate once warmed up for a vocabulary size, keep state between rows, or draw
// randomness itself (the caller passes the uniform).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace baton::cpu {

class RowSampler {
 public:
  // work /= temperature in place; returns the max, or NaN when an entry is NaN.
  static float scale_and_max(std::span<float> work, float temperature);

  // The processed distribution over work (already scaled, max_logit its finite max): top-k keeps
  // every entry >= the k-th largest; top-p the shortest prefix of (logit descending, id
  // ascending) whose mass reaches top_p; min-p drops e = exp(logit - max) below min_p; then
  // normalization (sums in double, p in fp32). top_k <= 0 or >= vocab, top_p >= 1, min_p <= 0:
  // off. Writes vocab entries into probs (zeros outside the kept set).
  void distribution(std::span<const float> work, float max_logit, std::int32_t top_k, float top_p, float min_p,
                    std::span<float> probs);

  // The first token whose cumulative probability (summed in double, in id order) reaches u (in
  // (0, 1]); if rounding leaves the total below u, the last token with nonzero probability.
  // probs must be >= 0 with at least one positive.
  static std::int32_t draw(std::span<const float> probs, double u);

 private:
  // A position in the order (logit descending, id ascending) that top-p cuts.
  struct TokenOrder {
    float logit;
    std::int32_t id;
  };
  static float kth_largest(std::span<const float> work, std::size_t k, std::span<float> scratch);
  // Top-p over every token: writes e = exp(logit - max) ([vocab]) and returns the last kept token.
  // Top-p over the list index_[0, n) (e already written): moves the kept tokens to index_[0,
  // returned) and zeros e of the others. Both sort only one boundary bucket (row_sampler.cc).
  TokenOrder dense_top_p(std::span<const float> work, float max_logit, float top_p, std::span<float> e);
  std::size_t listed_top_p(std::span<const float> work, float max_logit, float top_p, std::span<float> e,
                           std::size_t n);
  static std::vector<std::int32_t>::iterator cut_boundary_bucket(std::span<const float> work,
                                                                 std::vector<std::int32_t>::iterator first,
                                                                 std::vector<std::int32_t>::iterator last,
                                                                 double mass_before, double target,
                                                                 std::span<const float> e);

  std::vector<std::int32_t> index_;  // [vocab] candidate token ids
};

}  // namespace baton::cpu
