// Building metric families from values read at scrape time (a node's snapshot), for collectables
// that mirror counters someone else keeps (the engine). The exposer serialises them; nothing here
// writes exposition text.
//
// Must not: be used for events the process itself counts (use registry instruments for those).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "prometheus/metric_family.h"

namespace baton::metrics {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

class FamilyBuilder {
 public:
  FamilyBuilder(const char* name, const char* help, prometheus::MetricType type);
  // One series: `base` labels then `extra` ones.
  FamilyBuilder& add(const LabelPairs& base, double value, const LabelPairs& extra = {});
  // Moves the family out: call once, last.
  prometheus::MetricFamily build() { return std::move(family_); }

 private:
  prometheus::MetricFamily family_;
};

}  // namespace baton::metrics
