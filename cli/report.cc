#include "cli/report.h"

#include <cstdio>

#include "common/status.h"

namespace baton::cli {

nlohmann::json spec_report(const Engine& engine) {
  const SpecDecodeStats* st = engine.spec_stats();
  if (st == nullptr) return nullptr;
  return {{"method", std::string(spec_method_name(engine.speculative_config()->method))},
          {"num_speculative_tokens", engine.speculative_config()->num_speculative_tokens},
          {"num_drafts", st->num_drafts},
          {"num_draft_tokens", st->num_draft_tokens},
          {"num_accepted_tokens", st->num_accepted_tokens},
          {"accepted_per_position", st->accepted_per_position},
          {"adaptive_draft_length", engine.speculative_config()->adaptive_draft_length},
          {"verification", std::string(engine.speculative_config()->verification_name())},
          {"lossless", engine.speculative_config()->lossless()},
          {"proposals_by_length", st->proposals_by_length},
          // null, not 0, when there was nothing to measure
          {"acceptance_rate", st->num_draft_tokens > 0 ? nlohmann::json(st->acceptance_rate()) : nlohmann::json(nullptr)},
          {"mean_acceptance_length",
           st->num_drafts > 0 ? nlohmann::json(st->mean_acceptance_length()) : nlohmann::json(nullptr)}};
}

nlohmann::json request_spec_report(const std::string& method, const RequestSpecCounts& c) {
  return {{"method", method},
          {"num_drafts", c.num_drafts},
          {"num_draft_tokens", c.num_draft_tokens},
          {"num_accepted_tokens", c.num_accepted_tokens},
          {"accepted_per_position", c.accepted_per_position},
          {"proposals_by_length", c.proposals_by_length},
          {"lossy", c.lossy},
          // null, not 0, when there was nothing to measure
          {"acceptance_rate", c.num_draft_tokens > 0 ? nlohmann::json(static_cast<double>(c.num_accepted_tokens) /
                                                                      static_cast<double>(c.num_draft_tokens))
                                                     : nlohmann::json(nullptr)},
          {"mean_acceptance_length", c.num_drafts > 0 ? nlohmann::json(1.0 + static_cast<double>(c.num_accepted_tokens) /
                                                                              static_cast<double>(c.num_drafts))
                                                      : nlohmann::json(nullptr)}};
}

nlohmann::json logprobs_report(std::span<const TokenOutput> tokens) {
  nlohmann::json out = nlohmann::json::array();
  for (const TokenOutput& t : tokens) {
    nlohmann::json top = nlohmann::json::array();
    for (const TokenLogprob& x : t.top_logprobs) top.push_back({{"token_id", x.token}, {"logprob", x.logprob}});
    out.push_back({{"token_id", t.token}, {"logprob", t.logprob}, {"top_logprobs", top}});
  }
  return out;
}

std::string percent_text(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %%", 100.0 * fraction);
  return buf;
}

std::string spec_line(const std::string& method, std::int64_t drafts, std::int64_t draft_tokens,
                      std::int64_t accepted, bool lossy) {
  if (drafts == 0) return str_cat("speculative ", method, ": no drafts (no decode step proposed any)\n");
  const char* warning =
      lossy ? "speculative decoding was LOSSY: entropy verification accepted drafts the target would not have "
              "(rejection_sampler_config.enable_entropy_verify)\n"
            : "";
  char buf[256];
  const std::string rate =
      percent_text(draft_tokens > 0 ? static_cast<double>(accepted) / static_cast<double>(draft_tokens) : 0.0);
  std::snprintf(buf, sizeof buf, "%lld drafts, %lld draft tokens, %lld accepted (acceptance rate %s), mean acceptance length %.3f\n",
                static_cast<long long>(drafts), static_cast<long long>(draft_tokens), static_cast<long long>(accepted),
                rate.c_str(), 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts));
  return str_cat("speculative ", method, ": ", buf, warning);
}

}  // namespace baton::cli
