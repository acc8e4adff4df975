#include "metrics/families.h"

namespace baton::metrics {

FamilyBuilder::FamilyBuilder(const char* name, const char* help, prometheus::MetricType type) {
  family_.name = name;
  family_.help = help;
  family_.type = type;
}

FamilyBuilder& FamilyBuilder::add(const LabelPairs& base, double value, const LabelPairs& extra) {
  prometheus::ClientMetric m;
  for (const auto& [k, v] : base) m.label.push_back({k, v});
  for (const auto& [k, v] : extra) m.label.push_back({k, v});
  if (family_.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family_.metric.push_back(std::move(m));
  return *this;
}

}  // namespace baton::metrics
