#include "metrics/metrics_server.h"

#include <cstdio>
#include <exception>

#include "common/status.h"
#include "prometheus/exposer.h"

namespace baton::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(str_cat("--metrics-port must be in [0, 65535], got ", port));
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->registry_ = std::make_shared<prometheus::Registry>();
  try {
    // civetweb reports a bind failure by throwing.
    s->exposer_ = std::make_unique<prometheus::Exposer>(str_cat(host, ":", port), /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(str_cat("metrics endpoint on ", host, ":", port, ": ", e.what()));
  }
  const std::vector<int> ports = s->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError(str_cat("metrics endpoint on ", host, ":", port, ": not listening"));
  s->exposer_->RegisterCollectable(s->registry_);
  s->address_ = str_cat(host, ":", ports.front());
  s->url_ = str_cat("http://", s->address_, "/metrics");
  return s;
}

MetricsServer::~MetricsServer() {
  exposer_.reset();  // no scrape runs past this point
}

void MetricsServer::add(std::shared_ptr<prometheus::Collectable> collectable) {
  exposer_->RegisterCollectable(collectable);
  collectables_.push_back(std::move(collectable));
}

void announce_metrics(const std::string& binary, const MetricsServer& server) {
  std::printf("%s metrics on %s\n", binary.c_str(), server.url().c_str());
  std::fflush(stdout);
}

}  // namespace baton::metrics
