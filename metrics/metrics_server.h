// MetricsServer: a process's one Prometheus registry and the HTTP endpoint that serves it at
// /metrics. Instruments updated as events happen go in registry(); values read from a snapshot at
// scrape time come from collectables added with add(). prometheus-cpp's core collects and writes
// the text format; the event-driven http/ listener serves it on one I/O thread (a scrape runs
// there: other scrapes wait, nothing else does), with its deadlines and connection limit. (Not
// prometheus-cpp's civetweb Exposer: Debian's civetweb runs its workers on fixed 100 KB stacks,
// from which glibc also carves every thread's static TLS, and with OpenBLAS and the CUDA runtime
// loaded a scrape overflowed them.)
//
//   auto m = MetricsServer::start("127.0.0.1", 0);   // port 0: any free port
//   (*m)->url();                                      // http://127.0.0.1:PORT/metrics (https with TLS)
//
// Must not: block a scrape for long (collectables answer from a bounded wait).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "http/http_listener.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"
#include "security/tls_config.h"

namespace baton::metrics {

struct MetricsServerOptions {
  // HTTPS with the process's --tls-cert/--tls-key when set; with require_client_cert, only
  // scrapers showing a certificate of the cluster CA (--tls-ca) are served.
  security::TlsConfig tls;
  bool require_client_cert = false;
  // Checks a scrape's Authorization header; false answers 401. Empty: every scrape is served.
  std::function<bool(const std::string& authorization)> authorize;
};

class MetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsServer>> start(const std::string& host, int port,
                                                              MetricsServerOptions options = {});
  // The registry and collectables without an endpoint of their own: text() is served elsewhere
  // (the router's HTTP API serves /metrics without --metrics-port). url() and address() are "".
  static std::unique_ptr<MetricsServer> unserved();
  ~MetricsServer();

  prometheus::Registry& registry() { return *registry_; }
  void add(std::shared_ptr<prometheus::Collectable> collectable);
  // The name clients know the served model by (vLLM's `model_name` label), read at each scrape:
  // every series this process exports carries it (unless the name is empty, or the series has
  // the label already).
  void set_model_name(std::function<std::string()> model_name);
  std::string url() const { return url_; }
  std::string address() const { return address_; }  // host:port
  // The text exposition of the registry and every collectable: what GET /metrics answers.
  std::string text();

 private:
  MetricsServer() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::mutex mu_;  // guards collectables_ (add() runs while scrapes do)
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::function<std::string()> model_name_;  // guarded by mu_
  std::unique_ptr<http::HttpListener> http_;
  std::string url_, address_;
};

// The line every binary prints once its metrics are served, which `baton up` reads:
// "<binary> metrics on http(s)://HOST:PORT/metrics".
void announce_metrics(const std::string& binary, const MetricsServer& server);

}  // namespace baton::metrics
