#include "metrics/metrics_server.h"

#include <cstdio>

#include "common/http_listener.h"
#include "common/status.h"
#include "httplib.h"
#include "prometheus/text_serializer.h"
#include "security/tls_server_context.h"

namespace baton::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                                     MetricsServerOptions options) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(str_cat("--metrics-port must be in [0, 65535], got ", port));
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->registry_ = std::make_shared<prometheus::Registry>();
  const bool tls = options.tls.public_tls();
  if (tls) {
    absl::Status configured = absl::OkStatus();
    auto ssl = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      configured = security::configure_server_context(ctx, options.tls, options.require_client_cert);
      return configured.ok();
    });
    if (!configured.ok()) return configured;
    if (!ssl->is_valid()) return absl::InternalError("metrics endpoint: the TLS context could not be made");
    s->http_ = std::move(ssl);
  } else {
    s->http_ = std::make_unique<httplib::Server>();
  }
  s->http_->set_socket_options(reuse_address_only);  // a port in use fails instead of being shared
  MetricsServer* self = s.get();
  s->http_->Get("/metrics", [self, authorize = std::move(options.authorize)](const httplib::Request& req,
                                                                              httplib::Response& res) {
    if (authorize && !authorize(req.get_header_value("Authorization"))) {
      res.status = 401;
      res.set_content("401 Unauthorized: send 'Authorization: Bearer KEY'\n", "text/plain; charset=utf-8");
      return;
    }
    res.set_content(self->scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound = port == 0 ? s->http_->bind_to_any_port(host) : (s->http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(str_cat("metrics endpoint on ", host, ":", port, ": cannot bind (in use, or not an address of this host?)"));
  }
  s->serve_thread_ = start_accept_loop(*s->http_);
  s->address_ = str_cat(host, ":", bound);
  s->url_ = str_cat(tls ? "https://" : "http://", s->address_, "/metrics");
  return s;
}

MetricsServer::~MetricsServer() {
  http_->stop();  // no scrape runs past this point
  if (serve_thread_.joinable()) serve_thread_.join();
}

std::string MetricsServer::scrape() {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectables = collectables_;
  }
  for (const auto& c : collectables) {
    std::vector<prometheus::MetricFamily> more = c->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

void MetricsServer::add(std::shared_ptr<prometheus::Collectable> collectable) {
  std::lock_guard<std::mutex> lock(mu_);
  collectables_.push_back(std::move(collectable));
}

void announce_metrics(const std::string& binary, const MetricsServer& server) {
  std::printf("%s metrics on %s\n", binary.c_str(), server.url().c_str());
  std::fflush(stdout);
}

}  // namespace baton::metrics
