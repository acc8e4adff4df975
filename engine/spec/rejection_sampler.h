// Verification of one request's drafts against the target model's distributions: the lossless
// rejection sampler of Leviathan et al. / Chen et al. (REFERENCE.md §2) and block verification
// (Sun et al., ICLR 2025; REFERENCE.md §3). The output distribution of every emitted token is
// exactly the target's; greedy requests get exactly the target's argmax sequence.
//
// Pure functions over probability rows and the request's own random stream: no model, no KV, no
// batch, no allocation, no state. Randomness use is fixed per call (documented per function) so
// seeded requests are reproducible whatever else is in the batch. Accept tests, block
// verification's running quantities and every residual sum are computed in double.
//
// Residual draws are inverse-CDF draws like Sampler::draw: with u = rng.uniform() and the
// unnormalized residual r (mass Z, summed in double in id order), the first token whose cumulative
// r reaches u * Z. Bonus tokens are Sampler::draw(p_k, rng), so with k = 0 a verification step
// emits exactly what Sampler::sample would have emitted from the same generator state.
//
// Degenerate inputs never produce NaN:
//   - a draft with q(x) = 0 (it cannot have been drawn from q) is rejected; p(x) = 0 rejects too,
//     since u > 0;
//   - a residual whose mass is 0 falls back to a draw from the target row p at that position (one
//     uniform, as a residual draw). In exact arithmetic with drafts drawn from q this cannot happen
//     (see rejection_sampler.cc); it takes rounding of rows that agree to the last bit, or a draft
//     outside q's support, and drawing from p is then the target's own distribution there.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sample/sampler.h"

namespace baton {

struct VerifyInput {
  std::int32_t vocab_size = 0;
  std::span<const std::int32_t> drafts;  // [k] x_1..x_k, each in [0, vocab_size)
  // [(k + 1) * vocab] target probabilities p at each verified position (after the request's logits
  // processing; row i is the distribution of the token after drafts[0..i)). For greedy requests a
  // one-hot row at the target's argmax (any row works: greedy verification takes its argmax).
  std::span<const float> target_probs;
  // [k * vocab] draft probabilities q (row i is what drafts[i] was sampled from); empty means the
  // drafts are one-hot (deterministic proposers, greedy EAGLE/MTP/draft model). Ignored when greedy.
  std::span<const float> draft_probs;
  bool greedy = false;
};

struct VerifyResult {
  std::int32_t num_accepted = 0;  // drafts[0..num_accepted) are accepted
  std::int32_t next_token = 0;    // the correction at the first rejection, or the bonus token
};

// Token-wise rejection sampling.
// Greedy: accept while drafts[i] == argmax p_i (lowest id on ties), then emit the argmax of the
// first mismatching row, or of row k if all match. Consumes no randomness.
// Sampled: for i = 0, 1, ...: u = rng.uniform(); accept x_i iff q(x_i) > 0 and
// u <= p(x_i) / q(x_i) (one-hot drafts: q(x_i) = 1, so u <= p(x_i)). At the first rejection draw
// the correction from normalize(max(p_i - q_i, 0)) (one-hot: p_i without x_i) and stop; if all k
// are accepted draw the bonus from p_k.
// Randomness: one uniform per examined draft, then one for the final draw, in that order:
// k + 1 uniforms when all k are accepted, otherwise num_accepted + 2 (k = 0: one).
VerifyResult verify_standard(const VerifyInput& in, RequestRng& rng);

// Block verification (REFERENCE.md §3): accepts the longest prefix a jointly computed test allows;
// never fewer tokens in expectation than verify_standard, still exactly lossless. With one-hot
// drafts it is equivalent in law to verify_standard given the drafts (no draft prefix can be
// emitted more often than the target produces it, so P(tau >= i) is the same product of p(x_j),
// and both correct from p without the draft), at k residual passes over the vocabulary instead
// of one: it pays off only with probabilistic drafts.
// Greedy requests behave exactly as in verify_standard (no randomness).
// Sampled, with the paper's 1-based positions (x_i = drafts[i - 1], M_b(.|x_<=i) = target row i,
// M_s(.|x_<=i) = draft row i, or one-hot at drafts[i]):
//   p_0 = 1, p_i = min(p_{i-1} M_b(x_i | x_<i) / M_s(x_i | x_<i), 1) (0 when M_s(x_i | x_<i) = 0);
//   h_i = R_i / (R_i + 1 - p_i), R_i = sum_x max(p_i M_b(x | x_<=i) - M_s(x | x_<=i), 0), for i < k
//   (1 when the denominator is 0); h_k = p_k; eta_i = rng.uniform() for i = 1..k in order;
//   tau = the largest i with eta_i <= h_i, 0 if none; accept x_1..x_tau; if tau < k draw from
//   normalize(max(p_tau M_b(.|x_<=tau) - M_s(.|x_<=tau), 0)), else the bonus from target row k.
// Randomness: always k + 1 uniforms (eta_1..eta_k, then the final draw).
VerifyResult verify_block(const VerifyInput& in, RequestRng& rng);

}  // namespace baton
