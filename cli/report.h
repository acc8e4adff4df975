// The JSON pieces `baton generate` prints in its single-prompt and batch modes: the speculative
// decoding counters of an engine, and a request's logprobs.
#pragma once

#include <span>

#include "engine/engine.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

// vLLM's counters and the derived rates; null when the engine does not speculate.
nlohmann::json spec_report(const Engine& engine);
// [{token_id, logprob, top_logprobs: [{token_id, logprob}]}] per token.
nlohmann::json logprobs_report(std::span<const TokenOutput> tokens);

}  // namespace baton::cli
