// The Prometheus file_sd targets file `baton up --prometheus-targets FILE` writes: one target group
// per process (its metrics host:port) with job, role and node labels (the same values its series
// carry: scrape with honor_labels: true so they are not renamed exported_*), as Prometheus's
// file_sd_configs reads it.
//
// Must not: write a half file (it writes a temporary file and renames it).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace baton::metrics {

struct ScrapeTarget {
  std::string metrics_address;  // host:port of /metrics
  std::string role;
  std::string node;             // the process's gRPC address
};

std::string targets_json(const std::vector<ScrapeTarget>& targets);
absl::Status write_targets_file(const std::string& path, const std::vector<ScrapeTarget>& targets);

}  // namespace baton::metrics
