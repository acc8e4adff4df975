// baton-proposer: the proposer sidecar. Serves baton.node.v1.ProposerNode: decode nodes stream
// their requests' contexts here and get n-gram / suffix drafts back, from proposers shared by all
// nodes with the same configuration (so the suffix cache is global). No model, no GPU. Runs until
// SIGINT/SIGTERM; prints "baton-proposer ready on HOST:PORT (...)" once serving, and with
// --metrics-port serves /metrics (the decode nodes report the sidecar's round trips and misses).
#include <cstdio>
#include <memory>

#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "metrics/families.h"
#include "metrics/metrics_server.h"
#include "node_common/grpc_server.h"
#include "node_common/node_main.h"
#include "proposer_node/proposer_service.h"
#include "proto/grpc_exit.h"
#include "security/grpc_credentials.h"
#include "spdlog/spdlog.h"

namespace {

const std::vector<baton::FlagSpec>& proposer_flags() {
  static const std::vector<baton::FlagSpec> flags = [] {
    std::vector<baton::FlagSpec> f = {
        {"host", "HOST", "address to listen on (default 127.0.0.1)"},
        {"port", "PORT", "port to listen on (default 0: any free port, printed when ready)"},
        {"max-cached-requests", "N", "responses the global suffix cache holds, oldest evicted first (default 10000; "
                                     "0: no global cache)"},
        {"cache-scope", "SCOPE", "global (default: one cache for all decode nodes with the same config) or node "
                                 "(one per decode node)"},
        {"max-context-tokens", "N", "context tokens held per decode node (default 67108864)"},
        {"metrics-port", "PORT", "serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port, printed)"},
        {"served-model-name", "NAME", "the model its decode nodes serve, as the router's flag: the model_name label "
                                      "of its metrics (default: none; the sidecar itself holds no model)"},
    };
    const std::vector<baton::FlagSpec> tls = baton::security::tls_flag_specs();
    f.insert(f.end(), tls.begin(), tls.end());
    f.insert(f.end(), {{"log-level", "LEVEL", "trace, debug, info, warn, error (default info)"},
                       {"help", "", "show this help"}});
    return f;
  }();
  return flags;
}

constexpr const char* kSynopsis =
    "[--port P] [--host HOST] [--max-cached-requests N] [--cache-scope global|node]\n\n"
    "The proposer sidecar: n-gram and suffix drafts for many decode nodes, with a suffix cache\n"
    "shared by all of them. Decode nodes name it in their speculative config (proposer_endpoint).";

int fail(const absl::Status& s) {
  std::fprintf(stderr, "baton-proposer: %s\n", std::string(s.message()).c_str());
  return 1;
}

// The sidecar's state at scrape time: the decode nodes streaming to it.
class ProposerCollector final : public prometheus::Collectable {
 public:
  ProposerCollector(const baton::ProposerService& service, std::string node)
      : service_(service), base_({{"method", "all"}, {"role", "proposer"}, {"node", std::move(node)}}) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    return {baton::metrics::FamilyBuilder("baton_proposer_streams", "Decode nodes holding a Propose stream.",
                                          prometheus::MetricType::Gauge)
                .add(base_, static_cast<double>(service_.open_streams()))
                .build()};
  }

 private:
  const baton::ProposerService& service_;
  const baton::metrics::LabelPairs base_;
};

}  // namespace

static int run_proposer(int argc, char** argv) {
  using namespace baton;
  block_termination_signals();
  auto f = parse_flags(proposer_flags(), argc, argv);
  if (!f.ok()) {
    std::fprintf(stderr, "baton-proposer: %s\n\n%s", std::string(f.status().message()).c_str(),
                 usage("baton-proposer", kSynopsis, proposer_flags()).c_str());
    return 2;
  }
  if (f->has("help")) {
    std::printf("%s", usage("baton-proposer", kSynopsis, proposer_flags()).c_str());
    return 0;
  }
  if (absl::Status s = init_logging(f->get("log-level").value_or("info")); !s.ok()) return fail(s);
  auto tls = security::tls_config_from_flags(*f, security::TlsRole::kNode);
  if (!tls.ok()) return fail(tls.status());
  if (tls->cluster_tls()) spdlog::info("baton-proposer: {}", security::describe(*tls, security::TlsRole::kNode));
  else spdlog::warn("baton-proposer: {}", security::describe(*tls, security::TlsRole::kNode));

  ProposerServiceOptions options;
  const std::string scope = f->get("cache-scope").value_or("global");
  if (scope == "global") options.pool.scope = CacheScope::kGlobal;
  else if (scope == "node") options.pool.scope = CacheScope::kNode;
  else return fail(absl::InvalidArgumentError(str_cat("--cache-scope must be global or node, got '", scope, "'")));
  auto cached = f->get_int("max-cached-requests");
  if (!cached.ok()) return fail(cached.status());
  if (*cached) {
    if (**cached < 0 || **cached > INT32_MAX) {
      return fail(absl::InvalidArgumentError(str_cat("--max-cached-requests must be in [0, 2^31), got ", **cached)));
    }
    options.pool.max_cached_requests = static_cast<std::int32_t>(**cached);
  }
  auto tokens = f->get_int("max-context-tokens");
  if (!tokens.ok()) return fail(tokens.status());
  if (*tokens) {
    if (**tokens <= 0) return fail(absl::InvalidArgumentError(str_cat("--max-context-tokens must be positive, got ", **tokens)));
    options.max_context_tokens_per_node = **tokens;
  }
  auto port = f->get_int("port");
  if (!port.ok()) return fail(port.status());

  ProposerService service(options);
  auto server = start_grpc_server(f->get("host").value_or("127.0.0.1"), static_cast<int>(port->value_or(0)), {&service},
                                  security::cluster_server_credentials(*tls));
  if (!server.ok()) return fail(server.status());
  auto metrics_port = f->get_int("metrics-port");
  if (!metrics_port.ok()) return fail(metrics_port.status());
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (*metrics_port) {
    metrics::MetricsServerOptions metrics_options;
    metrics_options.tls = *tls;  // with TLS: HTTPS, scrapers show a certificate of the cluster CA
    metrics_options.require_client_cert = tls->cluster_tls();
    auto m = metrics::MetricsServer::start(f->get("host").value_or("127.0.0.1"), static_cast<int>(**metrics_port),
                                           std::move(metrics_options));
    if (!m.ok()) return fail(m.status());
    metrics_server = std::move(*m);
    metrics_server->set_model_name([name = f->get("served-model-name").value_or("")] { return name; });
    metrics_server->add(std::make_shared<ProposerCollector>(service, server->address));
    metrics::announce_metrics("baton-proposer", *metrics_server);
  }
  set_serving(*server->server, true);
  announce_ready("baton-proposer", server->address,
                 str_cat(scope, " suffix cache of ", options.pool.max_cached_requests, " responses"));
  // Nothing to drain: decode nodes hold their Propose streams open for as long as they run, and
  // draft locally when the sidecar is gone (lossless either way), so a short grace is enough.
  serve_until_signal(*server->server, nullptr, std::chrono::milliseconds(2000), [] {});
  return 0;
}

// Returns only once gRPC has shut down (proto/grpc_exit.h): every gRPC object is gone by now.
int main(int argc, char** argv) { return baton::exit_after_grpc_shutdown(run_proposer(argc, argv)); }
