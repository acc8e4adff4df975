// Turning one row of logits into a token: logits processing (penalties, temperature, top-k,
// top-p, min-p), seeded draws, and logprobs. Host code on f32 rows; one call per request row.
//
// The processing order is the one vLLM fixes for speculative decoding (docs/engine.md), so the
// rejection sampler can reuse target_probs() as p: penalties (seeing prompt + output so far),
// temperature, top-k, top-p, min-p, softmax in fp32. From temperature on, a row is handled by
// cpu::RowSampler (kernels/cpu/row_sampler.h), the code CpuBackend::sample_rows runs too, so a
// request the engine samples through the backend gets the tokens this class would draw.
//
// Must not: allocate per call once warmed up (scratch is reused), keep per-request state, or depend
// on anything but the row, the params, the history and the stream the caller passes (a keyed
// stream of the request's seed, random.h, so seeded requests are batch-independent).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

#include "engine/sample/random.h"
#include "engine/sample/sampling_params.h"
#include "kernels/cpu/row_sampler.h"

namespace baton {

// What the penalties look at: the prompt and the tokens generated so far (for verification,
// including the drafts accepted earlier in the same step).
struct TokenHistory {
  std::span<const std::int32_t> prompt;
  std::span<const std::int32_t> output;
  // Constrained output (response_format): allowed[id] != 0 for the tokens the grammar lets come
  // next, the rest get -inf after every other rule; empty: every token.
  std::span<const std::uint8_t> allowed;
};

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  std::int32_t token = 0;
  float logprob = 0.0f;              // of `token` under the raw (unprocessed) logits' log_softmax
  std::vector<TokenLogprob> top;     // top `logprobs` tokens of the raw log_softmax, best first
};

// Semantics (vLLM's, in that order):
//   repetition_penalty  for each distinct token in prompt or output: logit > 0 ? logit / r : logit * r;
//   frequency, presence for each distinct output token with count c: logit -= f * c, then -= p;
//   min_tokens          stop ids and EOS ids (unless ignore_eos) get -inf while output < min_tokens
//                       (skipped if it would mask every token);
//   greedy              argmax of the above, lowest id on ties; no randomness is drawn;
//   temperature         logit / T;
//   top-k               keeps every token whose logit is >= the k-th largest (ties at the k-th value
//                       are all kept, as vLLM does);
//   top-p               over the top-k set sorted by probability descending (lower id first on
//                       ties), keeps the shortest prefix whose mass is >= top_p (at least one token);
//   min-p               drops tokens with prob < min_p * max prob;
//   softmax             over the kept set: exp(logit - max) in fp32, sums in double, p in fp32.
// Not thread-safe (scratch); use one Sampler per thread.
class Sampler {
 public:
  // Applies the processing above and draws from target_probs() with `rng` (the engine passes
  // token_stream(seed, position)); greedy: the argmax, without touching `rng`. `logits` has vocab
  // entries (finite or -inf, no NaN) and is not modified. Token ids in `history` must be in [0, vocab); EOS ids outside it are ignored.
  // When params.logprobs >= 0 the result carries raw logprobs (see raw_logprobs); otherwise
  // `logprob` is 0 and `top` empty. Allocates nothing once warmed up for this vocab size, except
  // `top` when logprobs > 0.
  SampleResult sample(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                      std::span<const std::int32_t> eos_token_ids, RandomStream& rng);
  // sample(), target_probs() and greedy_token() abort on a row they cannot take (a NaN, no finite
  // entry, a max that overflows after temperature): for rows known to be good (tests, tools). The
  // engine's calls use these, which report such a row as DATA_LOSS, naming what is wrong, so that
  // only that request fails.
  absl::StatusOr<SampleResult> try_sample(std::span<const float> logits, const SamplingParams& params,
                                          const TokenHistory& history, std::span<const std::int32_t> eos_token_ids,
                                          RandomStream& rng);
  absl::Status try_target_probs(std::span<const float> logits, const SamplingParams& params,
                                const TokenHistory& history, std::span<const std::int32_t> eos_token_ids,
                                std::span<float> probs);
  absl::StatusOr<std::int32_t> try_greedy_token(std::span<const float> logits, const SamplingParams& params,
                                                const TokenHistory& history,
                                                std::span<const std::int32_t> eos_token_ids);

  // The processed target distribution p (sums to 1; zeros outside the kept set) for sampled
  // requests; for greedy requests a one-hot at the argmax. Writes vocab entries into probs.
  // sample() draws exactly from this: for the same generator state, sample() returns
  // draw(target_probs(...)).
  void target_probs(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                    std::span<const std::int32_t> eos_token_ids, std::span<float> probs);

  // Whether the next token's row is processed beyond temperature/top-k/top-p/min-p: a logit bias,
  // penalties, a response format's token mask, or a min_tokens mask after `output_len` output tokens. Rows that are not can be
  // sampled where the logits are (Backend::argmax_rows for greedy requests, Backend::sample_rows
  // otherwise) with the same result.
  static bool needs_row_processing(const SamplingParams& params, std::size_t output_len);
  // Greedy and !needs_row_processing: the token is the argmax of the raw logits.
  static bool takes_raw_argmax(const SamplingParams& params, std::size_t output_len) {
    return params.greedy() && !needs_row_processing(params, output_len);
  }

  // The greedy token: the argmax (lowest id on ties) of the processed logits, the token that
  // target_probs() puts its one-hot at for a greedy request, without writing a distribution.
  // Rows that need no processing (no penalties, no min_tokens mask) are read in place.
  std::int32_t greedy_token(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                            std::span<const std::int32_t> eos_token_ids);

  // A draw from a distribution over the vocabulary by inverse CDF with u = rng.uniform(): the
  // first token whose cumulative probability (summed in double, in id order) reaches u. If
  // rounding leaves the total below u, the last token with nonzero probability. Tokens with
  // probability 0 are never returned. probs must be >= 0 (no NaN), at least one positive.
  static std::int32_t draw(std::span<const float> probs, RandomStream& rng);

  // vLLM's raw logprobs: log_softmax of the unprocessed logits (max-subtracted, log-sum-exp in
  // double) for `token` and the `top_n` best tokens (best first, lower id first on ties). For
  // tokens emitted without sample(), e.g. accepted drafts.
  static SampleResult raw_logprobs(std::span<const float> logits, std::int32_t token, std::int32_t top_n);

 private:
  // work_ = the logits after penalties and (if mask_stops) the min_tokens mask.
  void load_logits(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                   std::span<const std::int32_t> eos_token_ids, bool mask_stops);
  std::optional<std::size_t> argmax() const;  // of work_, lowest id on ties; nullopt on NaN
  // Writes the target distribution into probs; returns the argmax for greedy requests, else -1.
  absl::StatusOr<std::int32_t> process(std::span<const float> logits, const SamplingParams& params,
                                       const TokenHistory& history, std::span<const std::int32_t> eos_token_ids,
                                       std::span<float> probs);

  std::vector<float> work_;            // [vocab] processed logits
  std::vector<float> probs_;           // [vocab] sample()'s target distribution
  std::vector<std::int32_t> counts_;   // [vocab] all zero between calls
  cpu::RowSampler row_;                // temperature onwards (kernels/cpu/row_sampler.h)
};

}  // namespace baton
