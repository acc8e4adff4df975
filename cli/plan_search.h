// `baton plan`'s search: simulates a trace (plan_sim.h) through every deployment up to the limits —
// P prefill nodes (0 = colocated), D decode nodes, each k tried — in order of node count, and picks
// the cheapest that meets the TTFT and TPOT targets: the fewest nodes, then the lowest TPOT.
// The figures are `baton bench serve`'s (serve_metrics.h), so a prediction reads like a measurement.
//
// Must not: print or read files.
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/plan_profile.h"
#include "cli/plan_sim.h"
#include "cli/plan_trace.h"
#include "cli/serve_metrics.h"

namespace baton::cli {

// Largest pools the search accepts (each simulation is cheap; this bounds the loop).
inline constexpr int kMaxPlannedNodesPerPool = 64;

struct SearchTargets {
  double ttft_ms = 0, tpot_ms = 0;
  int percentile = 90;  // 50, 90 or 99; 0: the mean
};

struct SearchLimits {
  int max_prefill = 8;
  int max_decode = 8;
  std::vector<int> ks;  // each a k the profile measured
  int host_cores = 0;
};

struct CandidateOutcome {
  Candidate candidate;
  ServeSummary summary;
  double ttft_ms = 0, tpot_ms = 0;  // the statistic the targets apply to
  bool meets = false;
};

struct SearchResult {
  std::vector<CandidateOutcome> tried;  // in search order
  std::optional<std::size_t> best;      // index into tried
};

// The simulated requests summarised as bench serve summarises measured ones.
ServeSummary summarize_simulation(const SimulationResult& sim, const std::vector<TraceRequest>& trace);

// INVALID_ARGUMENT for limits outside [0 or 1, kMaxPlannedNodesPerPool], no k, or a k the profile
// has not measured.
absl::StatusOr<SearchResult> search_deployments(const DeploymentProfile& profile, const std::vector<TraceRequest>& trace,
                                                const SearchTargets& targets, const SearchLimits& limits);

}  // namespace baton::cli
