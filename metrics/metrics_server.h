// MetricsServer: a process's one Prometheus registry and the HTTP endpoint that serves it at
// /metrics (prometheus-cpp's Exposer). Instruments updated as events happen go in registry();
// values read from a snapshot at scrape time come from collectables added with add().
//
//   auto m = MetricsServer::start("127.0.0.1", 0);   // port 0: any free port
//   (*m)->url();                                      // http://127.0.0.1:PORT/metrics
//
// Must not: block a scrape for long (collectables answer from a bounded wait).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace baton::metrics {

class MetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsServer>> start(const std::string& host, int port);
  ~MetricsServer();

  prometheus::Registry& registry() { return *registry_; }
  void add(std::shared_ptr<prometheus::Collectable> collectable);
  std::string url() const { return url_; }
  std::string address() const { return address_; }  // host:port

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string url_, address_;
};

// The line every binary prints once its metrics are served, which `baton up` reads:
// "<binary> metrics on http://HOST:PORT/metrics".
void announce_metrics(const std::string& binary, const MetricsServer& server);

}  // namespace baton::metrics
