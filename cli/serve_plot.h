// The PNG `baton bench serve --plot` draws when it ran several request rates: TTFT and TPOT
// percentiles (p50, p90, p99) against the request rate, drawn by gnuplot (Debian gnuplot-nox,
// pngcairo terminal) from the summaries.
//
// Must not: run without gnuplot silently (a clear error names the package).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/serve_metrics.h"

namespace baton::cli {

// x of each point: the offered rate, or the achieved request throughput for an unlimited rate.
absl::Status plot_latency_vs_rate(const std::vector<ServeSummary>& runs, const std::string& png_path);

// The gnuplot script (data inline), exposed for tests.
std::string latency_plot_script(const std::vector<ServeSummary>& runs, const std::string& png_path);

}  // namespace baton::cli
