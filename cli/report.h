// What `baton generate` reports in its single-prompt and batch modes, local or remote: the
// speculative decoding counters of an engine as JSON, a request's logprobs, and the one speculation
// line it prints on stderr.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/engine.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

// vLLM's counters and the derived rates; null when the engine does not speculate.
nlohmann::json spec_report(const Engine& engine);
// One request's counters (RequestOutput::spec) in spec_report's shape, for per-prompt JSON.
nlohmann::json request_spec_report(const std::string& method, const RequestSpecCounts& c);
// [{token_id, logprob, top_logprobs: [{token_id, logprob}]}] per token.
nlohmann::json logprobs_report(std::span<const TokenOutput> tokens);
// A rate (0..1) as people read it in every command's text: "37.58 %" (as `bench serve`'s
// "Acceptance rate (%)"). JSON keeps the fraction.
std::string percent_text(double fraction);
// "speculative METHOD: D drafts, T draft tokens, A accepted (acceptance rate R %), mean acceptance
// length L" (newline included), or "... no drafts ..." when there were none (a rate of nothing is
// not 0).
// `lossy` (entropy verification verified sampled drafts) ends the line with a warning.
std::string spec_line(const std::string& method, std::int64_t drafts, std::int64_t draft_tokens,
                      std::int64_t accepted, bool lossy = false);

}  // namespace baton::cli
