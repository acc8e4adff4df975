#include "engine/sample/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "common/status.h"
#include "kernels/cpu/argmax.h"
#include "kernels/cpu/row_sampler.h"

namespace baton {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::size_t checked_token(std::int32_t token, std::size_t vocab) {
  BATON_CHECK(token >= 0 && static_cast<std::size_t>(token) < vocab, "token id ", token,
              " in the request history is outside the vocabulary [0, ", vocab, ")");
  return static_cast<std::size_t>(token);
}

}  // namespace

void Sampler::load_logits(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                          std::span<const std::int32_t> eos_token_ids, bool mask_stops) {
  const std::size_t vocab = logits.size();
  work_.assign(logits.begin(), logits.end());
  if (counts_.size() != vocab) counts_.assign(vocab, 0);

  for (const auto& [token, bias] : params.logit_bias) work_[checked_token(token, vocab)] += bias;

  if (params.repetition_penalty != 1.0f) {
    const float r = params.repetition_penalty;
    // counts_ marks tokens already penalized so each distinct token is penalized once.
    for (std::span<const std::int32_t> tokens : {history.prompt, history.output}) {
      for (std::int32_t t : tokens) {
        const std::size_t i = checked_token(t, vocab);
        if (counts_[i] != 0) continue;
        counts_[i] = 1;
        work_[i] = work_[i] > 0.0f ? work_[i] / r : work_[i] * r;
      }
    }
    for (std::span<const std::int32_t> tokens : {history.prompt, history.output}) {
      for (std::int32_t t : tokens) counts_[static_cast<std::size_t>(t)] = 0;
    }
  }

  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    for (std::int32_t t : history.output) ++counts_[checked_token(t, vocab)];
    // The first visit of each distinct token applies its penalty and clears its count.
    for (std::int32_t t : history.output) {
      const auto i = static_cast<std::size_t>(t);
      if (counts_[i] == 0) continue;
      work_[i] -= params.frequency_penalty * static_cast<float>(counts_[i]);
      work_[i] -= params.presence_penalty;
      counts_[i] = 0;
    }
  }

  if (!history.allowed.empty()) {
    BATON_CHECK(history.allowed.size() == vocab, "a token mask of ", history.allowed.size(), " for a vocabulary of ",
                vocab);
    for (std::size_t i = 0; i < vocab; ++i) {
      if (history.allowed[i] == 0) work_[i] = kNegInf;
    }
  }

  if (mask_stops && history.output.size() < static_cast<std::size_t>(std::max(params.min_tokens, 0))) {
    for (std::int32_t t : params.stop_token_ids) {
      if (t >= 0 && static_cast<std::size_t>(t) < vocab) work_[static_cast<std::size_t>(t)] = kNegInf;
    }
    if (!params.ignore_eos) {
      for (std::int32_t t : eos_token_ids) {
        if (t >= 0 && static_cast<std::size_t>(t) < vocab) work_[static_cast<std::size_t>(t)] = kNegInf;
      }
    }
  }
}

std::optional<std::size_t> Sampler::argmax() const { return cpu::argmax_lowest(work_); }

namespace {

absl::Status bad_row(std::string_view what, std::size_t vocab) {
  return absl::DataLossError(str_cat("cannot sample: the logits row ", what, " (vocab ", vocab, ")"));
}

}  // namespace

bool Sampler::needs_row_processing(const SamplingParams& params, std::size_t output_len) {
  const bool penalties =
      params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  const bool masks_stops = output_len < static_cast<std::size_t>(std::max(params.min_tokens, 0));
  return penalties || masks_stops || !params.logit_bias.empty() || !params.response_format.empty();
}

absl::StatusOr<std::int32_t> Sampler::try_greedy_token(std::span<const float> logits, const SamplingParams& params,
                                                       const TokenHistory& history,
                                                       std::span<const std::int32_t> eos_token_ids) {
  const std::size_t vocab = logits.size();
  BATON_CHECK(vocab > 0, "empty logits row");
  if (takes_raw_argmax(params, history.output.size())) {
    // Nothing to process: the argmax of the logits as they are (no copy).
    const std::optional<std::size_t> best = cpu::argmax_lowest(logits);
    if (!best) return bad_row("holds a NaN", vocab);
    if (!(logits[*best] > kNegInf)) return bad_row("has no finite entry", vocab);
    return static_cast<std::int32_t>(*best);
  }
  // If min_tokens masked every token (stop_token_ids covering the vocabulary), the request cannot
  // be honoured: min_tokens is ignored rather than choosing from nothing.
  load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/true);
  std::optional<std::size_t> best = argmax();
  if (best && work_[*best] == kNegInf) {
    load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/false);
    best = argmax();
  }
  if (!best) return bad_row("holds a NaN after penalties", vocab);
  if (!(work_[*best] > kNegInf)) return bad_row("has no finite entry after penalties", vocab);
  return static_cast<std::int32_t>(*best);
}

std::int32_t Sampler::greedy_token(std::span<const float> logits, const SamplingParams& params,
                                   const TokenHistory& history, std::span<const std::int32_t> eos_token_ids) {
  absl::StatusOr<std::int32_t> t = try_greedy_token(logits, params, history, eos_token_ids);
  BATON_CHECK(t.ok(), t.status().message());
  return *t;
}

absl::StatusOr<std::int32_t> Sampler::process(std::span<const float> logits, const SamplingParams& params,
                                              const TokenHistory& history, std::span<const std::int32_t> eos_token_ids,
                                              std::span<float> probs) {
  const std::size_t vocab = logits.size();
  BATON_CHECK(vocab > 0, "empty logits row");
  BATON_CHECK(probs.size() == vocab, "probs has ", probs.size(), " entries for a vocabulary of ", vocab);
  if (params.greedy()) {
    BATON_ASSIGN_OR_RETURN(const std::int32_t best, try_greedy_token(logits, params, history, eos_token_ids));
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[static_cast<std::size_t>(best)] = 1.0f;
    return best;
  }
  // If min_tokens masked every token (stop_token_ids covering the vocabulary), the request cannot
  // be honoured: min_tokens is ignored rather than sampling from nothing.
  load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/true);

  float max_logit = cpu::RowSampler::scale_and_max(work_, params.temperature);
  if (max_logit == kNegInf) {
    load_logits(logits, params, history, eos_token_ids, /*mask_stops=*/false);
    max_logit = cpu::RowSampler::scale_and_max(work_, params.temperature);
  }
  if (!std::isfinite(max_logit)) {
    return bad_row(str_cat("has max ", max_logit, " after penalties and temperature ", params.temperature), vocab);
  }
  row_.distribution(work_, max_logit, params.top_k, params.top_p, params.min_p, probs);
  return -1;
}

absl::Status Sampler::try_target_probs(std::span<const float> logits, const SamplingParams& params,
                                       const TokenHistory& history, std::span<const std::int32_t> eos_token_ids,
                                       std::span<float> probs) {
  return process(logits, params, history, eos_token_ids, probs).status();
}

void Sampler::target_probs(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                           std::span<const std::int32_t> eos_token_ids, std::span<float> probs) {
  const absl::Status s = try_target_probs(logits, params, history, eos_token_ids, probs);
  BATON_CHECK(s.ok(), s.message());
}

absl::StatusOr<SampleResult> Sampler::try_sample(std::span<const float> logits, const SamplingParams& params,
                                                 const TokenHistory& history,
                                                 std::span<const std::int32_t> eos_token_ids, RandomStream& rng) {
  std::int32_t token = 0;
  if (params.greedy()) {
    // No distribution to write.
    BATON_ASSIGN_OR_RETURN(token, try_greedy_token(logits, params, history, eos_token_ids));
  } else {
    probs_.resize(logits.size());
    BATON_ASSIGN_OR_RETURN(const std::int32_t argmax, process(logits, params, history, eos_token_ids, probs_));
    token = argmax >= 0 ? argmax : draw(probs_, rng);
  }
  if (params.logprobs < 0) {
    SampleResult result;
    result.token = token;
    return result;
  }
  for (const float x : logits) {
    if (x == std::numeric_limits<float>::infinity()) return bad_row("holds +inf (no logprobs)", logits.size());
  }
  return raw_logprobs(logits, token, params.logprobs);
}

SampleResult Sampler::sample(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                             std::span<const std::int32_t> eos_token_ids, RandomStream& rng) {
  absl::StatusOr<SampleResult> s = try_sample(logits, params, history, eos_token_ids, rng);
  BATON_CHECK(s.ok(), s.status().message());
  return *std::move(s);
}

std::int32_t Sampler::draw(std::span<const float> probs, RandomStream& rng) {
  return cpu::RowSampler::draw(probs, rng.uniform());
}

SampleResult Sampler::raw_logprobs(std::span<const float> logits, std::int32_t token, std::int32_t top_n) {
  BATON_CHECK(token >= 0 && static_cast<std::size_t>(token) < logits.size(), "token ", token,
              " outside the vocabulary of ", logits.size());
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float x : logits) max_logit = std::max(max_logit, static_cast<double>(x));
  BATON_CHECK(std::isfinite(max_logit), "raw logits row max is ", max_logit);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_z = max_logit + std::log(sum);

  SampleResult result;
  result.token = token;
  result.logprob = static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(token)]) - log_z);
  const auto n = static_cast<std::size_t>(std::clamp(top_n, 0, static_cast<std::int32_t>(logits.size())));
  if (n == 0) return result;
  // Insertion into a best-first list of at most n: ids ascend, so a later token passes an equal one
  // never, and ties keep the lower id first.
  result.top.reserve(n + 1);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (result.top.size() == n && !(x > logits[static_cast<std::size_t>(result.top.back().token)])) continue;
    auto pos = result.top.end();
    while (pos != result.top.begin() && x > logits[static_cast<std::size_t>((pos - 1)->token)]) --pos;
    result.top.insert(pos, TokenLogprob{static_cast<std::int32_t>(i), 0.0f});
    if (result.top.size() > n) result.top.pop_back();
  }
  for (TokenLogprob& t : result.top) {
    t.logprob = static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(t.token)]) - log_z);
  }
  return result;
}

}  // namespace baton
