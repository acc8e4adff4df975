// The load generator of `baton bench serve`: sends every prompt once, arrivals following a Poisson
// process of the given rate (exponential gaps, seeded; infinite rate: all at once), with at most
// max_concurrency requests in flight (0: no limit). Each request runs on its own thread, so a slow
// request never delays the next arrival. Draws a progress bar on stderr.
//
// Must not: summarise (serve_metrics.h does), or hold a request back once its arrival time came
// and a concurrency slot is free.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "cli/serve_backend.h"

namespace baton::cli {

struct LoadOptions {
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  int max_concurrency = 0;
  std::uint64_t seed = 0;        // of the arrival times; per-request sampling seeds are seed + i when set
  bool progress = true;
};

// Arrival offsets in seconds from the start, non-decreasing (all 0 for an infinite rate).
std::vector<double> poisson_arrivals(std::size_t n, double rate, std::uint64_t seed);

struct LoadRun {
  std::vector<ServeResult> results;  // in prompt order
  double duration_s = 0;             // first send to last completion
};

LoadRun run_load(ServeBackend& backend, const std::vector<ServePrompt>& prompts, const ServeSampling& sampling,
                 const LoadOptions& options);

}  // namespace baton::cli
