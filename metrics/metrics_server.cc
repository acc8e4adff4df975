#include "metrics/metrics_server.h"

#include <algorithm>
#include <cstdio>

#include "common/status.h"
#include "prometheus/text_serializer.h"

namespace baton::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                                     MetricsServerOptions options) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(str_cat("--metrics-port must be in [0, 65535], got ", port));
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->registry_ = std::make_shared<prometheus::Registry>();
  http::ListenerOptions o;
  o.host = host;
  o.port = port;
  o.tls = options.tls;
  o.require_client_cert = options.require_client_cert;
  o.max_connections = 256;  // scrapers, not clients
  o.max_body_bytes = 4096;  // a scrape has no body
  o.io_threads = 1;
  MetricsServer* self = s.get();
  s->http_ = std::make_unique<http::HttpListener>(o, [self, authorize = std::move(options.authorize)](
                                                         std::shared_ptr<http::Exchange> ex) {
    const http::Request& req = ex->request();
    const std::string_view target(req.target().data(), req.target().size());
    http::Reply reply;
    reply.content_type = "text/plain; charset=utf-8";
    if (req.method() != boost::beast::http::verb::get || target.substr(0, target.find('?')) != "/metrics") {
      reply.status = 404;
      reply.body = "404 Not Found: this endpoint serves GET /metrics\n";
    } else if (authorize && !authorize(std::string(req[boost::beast::http::field::authorization]))) {
      reply.status = 401;
      reply.body = "401 Unauthorized: send 'Authorization: Bearer KEY'\n";
    } else {
      reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
      reply.body = self->text();
    }
    ex->reply(std::move(reply));
  });
  auto bound = s->http_->start();
  if (!bound.ok()) {
    return absl::UnavailableError(str_cat("metrics endpoint on ", host, ":", port, ": cannot bind (in use, or not an address of this host?)"));
  }
  s->address_ = str_cat(host, ":", *bound);
  s->url_ = str_cat(o.tls.public_tls() ? "https://" : "http://", s->address_, "/metrics");
  return s;
}

std::unique_ptr<MetricsServer> MetricsServer::unserved() {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->registry_ = std::make_shared<prometheus::Registry>();
  return s;
}

MetricsServer::~MetricsServer() {
  if (http_) http_->stop();  // no scrape runs past this point
}

std::string MetricsServer::text() {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  std::function<std::string()> model_name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectables = collectables_;
    model_name = model_name_;
  }
  for (const auto& c : collectables) {
    std::vector<prometheus::MetricFamily> more = c->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  if (const std::string name = model_name ? model_name() : std::string(); !name.empty()) {
    for (prometheus::MetricFamily& f : families) {
      for (prometheus::ClientMetric& m : f.metric) {
        const bool has = std::any_of(m.label.begin(), m.label.end(),
                                     [](const prometheus::ClientMetric::Label& l) { return l.name == "model_name"; });
        if (!has) m.label.push_back({"model_name", name});
      }
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

void MetricsServer::set_model_name(std::function<std::string()> model_name) {
  std::lock_guard<std::mutex> lock(mu_);
  model_name_ = std::move(model_name);
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
