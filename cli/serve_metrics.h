// The figures `baton bench serve` reports for one load level, in the spirit of `vllm bench
// serve`: TTFT, TPOT, inter-token latency and end-to-end latency (mean, p50, p90, p99, in ms),
// request and token throughput, goodput against latency targets, and the speculation counts the
// server returned (acceptance rate, mean acceptance length).
//
// TPOT of a request: (end-to-end - TTFT) / (output tokens - 1), for requests with 2+ tokens.
// ITL: the gaps between consecutive token-carrying messages, over all requests (with speculation
// one message often carries several tokens, so ITL and TPOT differ).
// Percentiles interpolate linearly between order statistics (numpy's default).
//
// Must not: time anything itself (serve_runner.h measures; this only summarises).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/serve_backend.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

struct LatencyStats {
  std::size_t count = 0;
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0;
};

// A request counts toward goodput when every target given is met (all in ms).
struct GoodputTargets {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};

// "ttft:500,tpot:50" (also space-separated); keys ttft, tpot, e2el.
absl::StatusOr<GoodputTargets> parse_goodput(const std::string& spec);

struct ServeSummary {
  std::string label;
  double request_rate = std::numeric_limits<double>::infinity();  // offered, requests/s
  int max_concurrency = 0;                                        // 0: unlimited
  std::size_t completed = 0, failed = 0;
  double duration_s = 0;
  std::int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> goodput;  // requests/s meeting the targets
  LatencyStats ttft, tpot, itl, e2el;
  std::int64_t num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0;
  std::optional<double> acceptance_rate;         // accepted / draft tokens
  std::optional<double> mean_acceptance_length;  // 1 + accepted / drafts (tokens per verification)
  std::vector<std::string> errors;               // the first few failures
};

double percentile(std::vector<double> values, double q);  // q in [0, 100]; 0 for no values
LatencyStats latency_stats(const std::vector<double>& seconds);

ServeSummary summarize(const std::vector<ServeResult>& results, double duration_s, const GoodputTargets& targets);

nlohmann::json summary_json(const ServeSummary& s);
// The human-readable block printed per load level.
std::string summary_table(const ServeSummary& s);

}  // namespace baton::cli
