#include "metrics/targets_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::metrics {

std::string targets_json(const std::vector<ScrapeTarget>& targets) {
  nlohmann::json groups = nlohmann::json::array();
  for (const ScrapeTarget& t : targets) {
    groups.push_back({{"targets", {t.metrics_address}},
                      {"labels", {{"job", "baton"}, {"role", t.role}, {"node", t.node}}}});
  }
  return groups.dump(2) + "\n";
}

absl::Status write_targets_file(const std::string& path, const std::vector<ScrapeTarget>& targets) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << targets_json(targets);
    if (!out) return absl::UnavailableError(str_cat("cannot write Prometheus targets file ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::UnavailableError(str_cat("cannot write Prometheus targets file ", path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace baton::metrics
