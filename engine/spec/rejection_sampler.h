// Verification of one request's drafts against the target model's distributions: the lossless
// rejection sampler of Leviathan et al. / Chen et al. (2023) and block verification
// (Sun et al., ICLR 2025). The output distribution of every emitted token is
// exactly the target's; greedy requests get exactly the target's argmax sequence.
//
// Pure functions over probability rows and the request's keyed random numbers (random.h): no
// model, no KV, no batch, no allocation, no state. Accept tests, block verification's running
// quantities and every residual sum are computed in double.
//
// Where the randomness comes from (VerifyRandomness: the request's seed and the position of the
// first token the step decides):
//   - one-hot drafts (n-gram, suffix, greedy EAGLE/MTP/draft model): position i's token is
//     y_i = Sampler::draw(p_i, token_stream(seed, position + i)) — exactly the draw plain decoding
//     makes there; the draft is accepted iff it equals y_i, and y_i is emitted at the first
//     mismatch (or as the bonus). The law is the token-wise rule's (accept with probability p(x),
//     else a draw from p without x), the acceptance rate the same, and the output is token for
//     token what plain sampling with the same seed emits, whatever the drafts were. So seeded
//     output cannot depend on how many drafts a proposer made, or on other requests. Block
//     verification equals token-wise verification in law for one-hot drafts and uses this too.
//   - probabilistic drafts: the joint rules below read RandomStream(seed, kVerify, position) in
//     the documented order. Residual draws are inverse-CDF draws like Sampler::draw: with u from
//     that stream and the unnormalized residual r (mass Z, summed in double in id order), the
//     first token whose cumulative r reaches u * Z; the bonus token is Sampler::draw(p_k) with
//     the same stream.
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

#include "engine/sample/random.h"
#include "engine/sample/sampler.h"

namespace baton {

// Entropy verification (vLLM Ascend's rejection_sampler_config.enable_entropy_verify): LOSSY by
// design. At a draft's position, with p the target row that scores it, the test's uniform is scaled
// by t = min(exp(-posterior_alpha * H(p)), posterior_threshold), H(p) = -sum_x p(x) ln(p(x) + 1e-10)
// in nats: an uncertain target accepts more drafts. The output is then no longer the target's
// distribution; greedy requests are not affected (their verification has no uniform).
struct EntropyVerification {
  bool enabled = false;
  double posterior_threshold = 0.95;  // in (0, 1]
  double posterior_alpha = 0.4;       // >= 0
};

// t above for a target row (enabled or not: the caller decides whether to use it).
double entropy_threshold(std::span<const float> target_row, const EntropyVerification& entropy);

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
  // Null or disabled: the lossless rules. Otherwise each accept test scales its uniform by the
  // position's t (entropy_threshold), as each function below says.
  const EntropyVerification* entropy = nullptr;
};

// The request's seed and the position (index in prompt + output) of the first token the step
// decides: the one after the pending token, i.e. the position of drafts[0].
struct VerifyRandomness {
  std::uint64_t seed = 0;
  std::int64_t position = 0;
};

struct VerifyResult {
  std::int32_t num_accepted = 0;  // drafts[0..num_accepted) are accepted
  std::int32_t next_token = 0;    // the correction at the first rejection, or the bonus token
};

// Token-wise rejection sampling.
// Greedy: accept while drafts[i] == argmax p_i (lowest id on ties), then emit the argmax of the
// first mismatching row, or of row k if all match. Consumes no randomness.
// Sampled, one-hot drafts: the matching rule above (one token-stream draw per examined position).
// Sampled, probabilistic drafts: for i = 0, 1, ...: u = next uniform; accept x_i iff q(x_i) > 0
// and u <= p(x_i) / q(x_i). At the first rejection draw the correction from
// normalize(max(p_i - q_i, 0)) and stop; if all k are accepted draw the bonus from p_k.
// Stream use: one uniform per examined draft, then one for the final draw: k + 1 uniforms when
// all k are accepted, otherwise num_accepted + 2.
// With entropy verification (lossy): probabilistic drafts accept x_i iff q(x_i) > 0 and
// u * t_i <= p(x_i) / q(x_i), the residual as above. One-hot drafts accept x_i with probability
// min(p(x_i) / t_i, 1): plain sampling's draw y_i as above, and when y_i != x_i one uniform v from
// verify_stream (one per such position, in order) accepts x_i anyway iff
// v * (1 - p(x_i)) <= min(p(x_i) / t_i, 1) - p(x_i); otherwise y_i is emitted (a draw from p
// without x_i). So the output differs from plain sampling's only where such an extra acceptance
// happened.
VerifyResult verify_standard(const VerifyInput& in, const VerifyRandomness& random);

// Block verification (Sun et al.): accepts the longest prefix a jointly computed test allows;
// never fewer tokens in expectation than verify_standard, still exactly lossless. With one-hot
// drafts it is equivalent in law to verify_standard given the drafts (no draft prefix can be
// emitted more often than the target produces it, so P(tau >= i) is the same product of p(x_j),
// and both correct from p without the draft), so one-hot drafts take the matching rule here too;
// it pays off only with probabilistic drafts.
// Greedy requests behave exactly as in verify_standard (no randomness).
// Sampled, probabilistic drafts, with the paper's 1-based positions (x_i = drafts[i - 1],
// M_b(.|x_<=i) = target row i, M_s(.|x_<=i) = draft row i):
//   p_0 = 1, p_i = min(p_{i-1} M_b(x_i | x_<i) / M_s(x_i | x_<i), 1) (0 when M_s(x_i | x_<i) = 0);
//   h_i = R_i / (R_i + 1 - p_i), R_i = sum_x max(p_i M_b(x | x_<=i) - M_s(x | x_<=i), 0), for i < k
//   (1 when the denominator is 0); h_k = p_k; eta_i = next uniform for i = 1..k in order;
//   tau = the largest i with eta_i <= h_i, 0 if none; accept x_1..x_tau; if tau < k draw from
//   normalize(max(p_tau M_b(.|x_<=tau) - M_s(.|x_<=tau), 0)), else the bonus from target row k.
// Stream use: always k + 1 uniforms (eta_1..eta_k, then the final draw).
// With entropy verification (lossy): the test is eta_i * t_i <= h_i, t_i from the row that scores
// x_i; one-hot drafts take verify_standard's entropy rule.
VerifyResult verify_block(const VerifyInput& in, const VerifyRandomness& random);

// The stream probabilistic-draft verification reads.
inline RandomStream verify_stream(const VerifyRandomness& r) {
  return RandomStream(r.seed, RandomPurpose::kVerify, r.position);
}

}  // namespace baton
