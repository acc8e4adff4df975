#include "cli/plan_search.h"

#include "common/status.h"

namespace baton::cli {

namespace {

double statistic(const LatencyStats& s, int percentile) {
  switch (percentile) {
    case 50: return s.p50_ms;
    case 90: return s.p90_ms;
    case 99: return s.p99_ms;
    default: return s.mean_ms;
  }
}

}  // namespace

ServeSummary summarize_simulation(const SimulationResult& sim, const std::vector<TraceRequest>& trace) {
  std::vector<ServeResult> results;
  results.reserve(sim.requests.size());
  for (std::size_t i = 0; i < sim.requests.size(); ++i) {
    ServeResult r;
    r.ok = true;
    r.ttft_s = sim.requests[i].ttft_s;
    r.e2e_s = sim.requests[i].e2e_s;
    r.prompt_tokens = trace[i].prompt_tokens;
    r.output_tokens = sim.requests[i].output_tokens;
    results.push_back(r);
  }
  return summarize(results, sim.duration_s, {});
}

absl::StatusOr<SearchResult> search_deployments(const DeploymentProfile& profile, const std::vector<TraceRequest>& trace,
                                                const SearchTargets& targets, const SearchLimits& limits) {
  if (limits.max_prefill < 0 || limits.max_prefill > kMaxPlannedNodesPerPool || limits.max_decode < 1 ||
      limits.max_decode > kMaxPlannedNodesPerPool) {
    return absl::InvalidArgumentError(str_cat("pool limits must be in [0, ", kMaxPlannedNodesPerPool,
                                              "] (prefill) and [1, ", kMaxPlannedNodesPerPool, "] (decode)"));
  }
  if (limits.ks.empty()) return absl::InvalidArgumentError("no k to try");
  for (int k : limits.ks) BATON_RETURN_IF_ERROR(profile.decode_step_seconds(k, 1).status());
  SearchResult result;
  for (int total = 1; total <= limits.max_prefill + limits.max_decode && !result.best; ++total) {
    for (int d = 1; d <= std::min(total, limits.max_decode); ++d) {
      const int p = total - d;
      if (p > limits.max_prefill) continue;
      for (int k : limits.ks) {
        CandidateOutcome o;
        o.candidate = Candidate{p, d, k, limits.host_cores, 0};
        BATON_ASSIGN_OR_RETURN(const SimulationResult sim, simulate(profile, trace, o.candidate));
        o.summary = summarize_simulation(sim, trace);
        o.ttft_ms = statistic(o.summary.ttft, targets.percentile);
        o.tpot_ms = statistic(o.summary.tpot, targets.percentile);
        o.meets = o.ttft_ms <= targets.ttft_ms && o.tpot_ms <= targets.tpot_ms;
        result.tried.push_back(std::move(o));
        const CandidateOutcome& last = result.tried.back();
        // Candidates come in order of node count, so the first total with one that meets is the
        // cheapest; among its candidates the lowest TPOT wins.
        if (last.meets && (!result.best || last.tpot_ms < result.tried[*result.best].tpot_ms)) {
          result.best = result.tried.size() - 1;
        }
      }
    }
  }
  return result;
}

}  // namespace baton::cli
