// The command line and serving life of a node binary (baton-prefill, baton-decode), which differ
// only in their service and role flags: the engine's flags plus the node flags (--host, --port,
// --advertise-host, --transport, --handoff-lease-ms, --register-with, --metrics-port, --drain-timeout-ms, the TLS
// flags of security/tls_config.h, --log-level, --help), usage and errors prefixed with the binary's name, and serve(): listen, report SERVING,
// register with a router if asked, print the "ready on" line, and drain on SIGINT/SIGTERM
// (node_main.h).
//
// Must not: know what a prefill or decode node does.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"
#include "grpcpp/grpcpp.h"
#include "metrics/metrics_server.h"
#include "node_common/node_main.h"
#include "security/grpc_credentials.h"
#include "security/tls_config.h"

namespace baton {

class NodeCommand {
 public:
  // `role_flags` come after the engine's and before the common node flags.
  NodeCommand(std::string binary, std::string synopsis, std::vector<FlagSpec> role_flags);

  // Parses argv and sets up logging. nullopt: go on with flags(); otherwise the exit code (0 after
  // --help, 2 for bad flags, 1 for a bad log level), the message already printed.
  std::optional<int> parse(int argc, char** argv);
  const ParsedFlags& flags() const { return flags_; }
  // The node's TLS settings (mutual TLS with the cluster CA, or --insecure), checked by parse().
  const security::TlsConfig& tls() const { return tls_; }

  // --name as a positive duration in milliseconds, if given.
  absl::StatusOr<std::optional<std::chrono::milliseconds>> positive_ms(const std::string& name) const;

  // --served-model-name, else --model's base name: the node's model name in Info and metrics.
  std::string model_name() const;

  // Prints "<binary>: <message>" on stderr; returns 1.
  int fail(const absl::Status& status) const;

  // Serves `service` until SIGINT/SIGTERM, then drains `drainable` (the same object) for up to
  // --drain-timeout-ms. `set_address` learns the bound address before the node
  // reports SERVING; `stop` stops the service after the server drained. With --metrics-port,
  // /metrics is served from then on: `add_metrics` registers the node's instruments and
  // collectors (it gets the node's address for the node label), and "<binary> metrics on URL" is
  // printed before the ready line. Returns the exit code.
  using AddMetrics = std::function<void(metrics::MetricsServer&, const std::string& address)>;
  int serve(grpc::Service& service, DrainableService& drainable, const std::string& role, const std::string& details,
            const std::function<void(const std::string&)>& set_address, const std::function<void()>& stop,
            const AddMetrics& add_metrics = nullptr) const;

 private:
  std::string binary_;
  std::string synopsis_;
  std::vector<FlagSpec> specs_;
  ParsedFlags flags_;
  security::TlsConfig tls_;
  security::InstalledClusterCredentials installed_credentials_;
};

}  // namespace baton
