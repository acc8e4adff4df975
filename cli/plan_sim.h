// Simulates a request trace (plan_trace.h) through a candidate deployment — P prefill nodes, D
// decode nodes, k drafts per step — with the speeds of a measured profile (plan_profile.h), and
// reports each request's TTFT and end-to-end latency as a client would see them.
//
// The model follows Baton's request path (docs/architecture.md):
//   - the router places each request on arrival: the prefill node with the fewest queued prompt
//     tokens, the decode node with the fewest requests (running, joining or in hand-off);
//   - a prefill node runs its queue first come, first served, as many prompts per forward as
//     max_num_batched_tokens holds (one at least), and samples the first token;
//   - the KV streams layer by layer during the forward, so what remains after it is the larger of
//     one layer's bytes and the bytes the forward did not hide, over the bandwidth, plus the
//     transport's latency; the first token reaches the client then (TTFT), and the request joins
//     its decode node's batch at the next step;
//   - a decode node steps while it has requests (at most max_num_seqs running); a step at batch B
//     takes the profile's step time at (k, B) and yields each request 1 + n tokens, n drawn from
//     the profile's acceptance by position (seeded);
//   - P = 0: decode nodes prefill their own requests inside their steps (colocated), and a request
//     decodes from its first token on, as after a hand-off;
//   - host_cores > 0: every node runs on one machine with that many cores, each busy node using
//     the profile's threads; when the busy nodes want more threads than there are cores, all of
//     them slow down in proportion (processor sharing). The serving path's CPU per output token
//     (router, client, transports; measured by the profile on this host) runs as one more busy
//     thread while it has work. 0: each node has its own hardware.
// Every request pays the profile's fixed per-request overhead on its TTFT (and so on its E2E).
//
// Must not: measure anything or read files; deterministic for a given seed.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/plan_profile.h"
#include "cli/plan_trace.h"

namespace baton::cli {

struct Candidate {
  int num_prefill = 1;  // 0: decode nodes prefill locally
  int num_decode = 1;
  int k = 0;            // drafts per step; a k the profile measured
  int host_cores = 0;   // > 0: all nodes share this many cores
  std::uint64_t seed = 0;
};

struct SimulatedRequest {
  double ttft_s = 0;
  double e2e_s = 0;
  std::int32_t output_tokens = 0;
};

struct SimulationResult {
  std::vector<SimulatedRequest> requests;  // in trace order
  double duration_s = 0;                   // first arrival to last completion
};

// INVALID_ARGUMENT for a candidate the profile cannot describe (unmeasured k, no decode node).
absl::StatusOr<SimulationResult> simulate(const DeploymentProfile& profile, const std::vector<TraceRequest>& trace,
                                          const Candidate& candidate);

}  // namespace baton::cli
