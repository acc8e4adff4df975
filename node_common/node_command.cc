#include "node_common/node_command.h"

#include <cstdio>

#include "common/logging.h"
#include "common/status.h"
#include "node_common/engine_flags.h"
#include "node_common/grpc_server.h"
#include "node_common/node_info.h"
#include "node_common/node_main.h"
#include "security/grpc_credentials.h"
#include "spdlog/spdlog.h"

namespace baton {

NodeCommand::NodeCommand(std::string binary, std::string synopsis, std::vector<FlagSpec> role_flags)
    : binary_(std::move(binary)), synopsis_(std::move(synopsis)), specs_(engine_flags()) {
  specs_.insert(specs_.end(), role_flags.begin(), role_flags.end());
  specs_.insert(specs_.end(), {
      {"host", "HOST", "address to listen on (default 127.0.0.1)"},
      {"port", "PORT", "port to listen on (default 0: any free port, printed when ready)"},
      {"advertise-host", "HOST", "the host the router and other nodes reach this node at, when it differs from "
                                 "--host (e.g. the pod IP with --host 0.0.0.0); it names the node in Info, "
                                 "registration, metrics and the ready line (default: --host)"},
      {"handoff-lease-ms", "MS", "how long KV held for a hand-off waits for its transfer or commit (default 60000)"},
      {"register-with", "HOST:PORT", "announce this node to the router's registry at HOST:PORT (its --internal-port) "
                                     "once serving, instead of listing it in the router's flags"},
      {"metrics-port", "PORT", "serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port, printed)"},
      {"served-model-name", "NAME", "the model id clients know this model by, as the router's flag: the node's "
                                    "model name in Info and the model_name label of its metrics (default: --model's "
                                    "base name)"},
      {"drain-timeout-ms", "MS", "on SIGTERM: report NOT_SERVING, refuse new requests and give running ones this "
                                 "long to finish before cancelling them (default 30000)"},
  });
  const std::vector<FlagSpec> tls = security::tls_flag_specs();
  specs_.insert(specs_.end(), tls.begin(), tls.end());
  specs_.insert(specs_.end(), {
      {"log-level", "LEVEL", "trace, debug, info, warn, error (default info)"},
      {"help", "", "show this help"},
  });
}

std::optional<int> NodeCommand::parse(int argc, char** argv) {
  auto parsed = parse_flags(specs_, argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n\n%s", binary_.c_str(), std::string(parsed.status().message()).c_str(),
                 usage(binary_, synopsis_, specs_).c_str());
    return 2;
  }
  flags_ = std::move(*parsed);
  if (flags_.has("help")) {
    std::printf("%s", usage(binary_, synopsis_, specs_).c_str());
    return 0;
  }
  if (absl::Status s = init_logging(flags_.get("log-level").value_or("info")); !s.ok()) return fail(s);
  auto tls = security::tls_config_from_flags(flags_, security::TlsRole::kNode);
  if (!tls.ok()) return fail(tls.status());
  tls_ = std::move(*tls);
  // Before the engine and its KV transports open any channel to a peer.
  installed_credentials_ = security::install_cluster_credentials(tls_);
  const std::string how = security::describe(tls_, security::TlsRole::kNode);
  if (tls_.cluster_tls()) spdlog::info("{}: {}", binary_, how);
  else spdlog::warn("{}: {}", binary_, how);
  return std::nullopt;
}

absl::StatusOr<std::optional<std::chrono::milliseconds>> NodeCommand::positive_ms(const std::string& name) const {
  BATON_ASSIGN_OR_RETURN(auto v, flags_.get_int(name));
  if (!v) return std::optional<std::chrono::milliseconds>();
  if (*v <= 0) return absl::InvalidArgumentError(str_cat("--", name, " must be positive, got ", *v));
  return std::optional<std::chrono::milliseconds>(std::chrono::milliseconds(*v));
}

std::string NodeCommand::model_name() const {
  if (auto name = flags_.get("served-model-name"); name && !name->empty()) return *name;
  return model_name_of(flags_.get("model").value_or(""));
}

int NodeCommand::fail(const absl::Status& status) const {
  std::fprintf(stderr, "%s: %s\n", binary_.c_str(), std::string(status.message()).c_str());
  return 1;
}

int NodeCommand::serve(grpc::Service& service, DrainableService& drainable, const std::string& role, const std::string& details,
                       const std::function<void(const std::string&)>& set_address, const std::function<void()>& stop,
                       const AddMetrics& add_metrics) const {
  auto port = flags_.get_int("port");
  if (!port.ok()) return fail(port.status());
  auto metrics_port = flags_.get_int("metrics-port");
  if (!metrics_port.ok()) return fail(metrics_port.status());
  auto drain_timeout = positive_ms("drain-timeout-ms");
  if (!drain_timeout.ok()) return fail(drain_timeout.status());
  const std::string host = flags_.get("host").value_or("127.0.0.1");
  auto server =
      start_grpc_server(host, static_cast<int>(port->value_or(0)), {&service}, security::cluster_server_credentials(tls_));
  if (!server.ok()) return fail(server.status());
  // The address others know this node by: the bound port on --advertise-host when given (a
  // wildcard listen address such as 0.0.0.0 cannot be dialled from another machine).
  std::string address = server->address;
  if (auto advertise = flags_.get("advertise-host")) {
    if (advertise->empty()) {
      stop();
      return fail(absl::InvalidArgumentError("--advertise-host is empty"));
    }
    const std::string port_part = address.substr(address.rfind(':') + 1);
    const bool ipv6 = advertise->find(':') != std::string::npos && advertise->front() != '[';
    address = ipv6 ? str_cat("[", *advertise, "]:", port_part) : str_cat(*advertise, ":", port_part);
  }
  set_address(address);
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (*metrics_port) {
    metrics::MetricsServerOptions metrics_options;
    metrics_options.tls = tls_;  // with TLS: HTTPS, scrapers show a certificate of the cluster CA
    metrics_options.require_client_cert = tls_.cluster_tls();
    auto m = metrics::MetricsServer::start(host, static_cast<int>(**metrics_port), std::move(metrics_options));
    if (!m.ok()) {
      stop();
      return fail(m.status());
    }
    metrics_server = std::move(*m);
    metrics_server->set_model_name([name = model_name()] { return name; });
    if (add_metrics) add_metrics(*metrics_server, address);
    metrics::announce_metrics(binary_, *metrics_server);
  }
  set_serving(*server->server, true);
  if (auto router = flags_.get("register-with")) {
    if (absl::Status s = register_with_router(*router, address, role, std::chrono::seconds(30)); !s.ok()) {
      stop();
      return fail(s);
    }
  }
  announce_ready(binary_, address, details);
  serve_until_signal(*server->server, &drainable, drain_timeout->value_or(std::chrono::milliseconds(30000)), stop);
  return 0;
}

}  // namespace baton
