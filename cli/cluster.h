// LocalCluster: starts and stops the processes of a local Baton cluster (a proposer sidecar if
// asked, decode nodes, prefill nodes, then the router) and knows where their binaries are. Used by `baton up` and by the
// end-to-end tests, so both run exactly the same processes.
//
// Must not: outlive its children: the destructor stops the router first, then the nodes.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "metrics/targets_file.h"

namespace baton::cli {

struct ClusterOptions {
  std::string model_dir;
  std::optional<std::string> speculative_config;  // the decode nodes'; prefill nodes get k = 1
  int num_prefill = 1;
  int num_decode = 1;
  std::string host = "127.0.0.1";
  int router_port = 0;                  // 0: any free port
  std::optional<int> http_port;         // the router's OpenAI HTTP API (0: any free port); none: off
  std::string transport = "ucx";        // "ucx" or "grpc": what decode nodes offer first
  std::string bin_dir;                  // "" : next to this executable; else a folder (or build tree) holding them
  // The node binaries' names; tests name the builds with test hooks (baton-prefill-testing,
  // baton-decode-testing) to use their --testing-* flags.
  std::string prefill_binary = "baton-prefill";
  std::string decode_binary = "baton-decode";
  std::string log_dir;                  // where each process writes <name>.log
  int threads_per_node = 0;             // 0: cores / nodes (at least 1)
  std::vector<std::string> node_args;   // extra flags for every node (e.g. --kv-cache-memory 0.25)
  std::vector<std::string> prefill_args;
  std::vector<std::string> decode_args;
  std::vector<std::string> router_args;
  std::vector<std::pair<std::string, std::string>> env;  // for every child (e.g. UCX_TLS)
  bool metrics = false;                 // every process serves /metrics on a free port (--metrics-port 0)
  // Start one baton-proposer first and point every decode node's speculative config at it
  // (proposer_endpoint); needs a speculative config with method ngram or suffix.
  bool proposer_sidecar = false;
  std::vector<std::string> proposer_args;  // extra flags for baton-proposer
  std::chrono::milliseconds start_timeout{120000};
  bool echo_logs = false;
  // Mutual TLS between every process, TLS on the router's public ports: a throwaway CA and one
  // certificate per process under LOG_DIR/tls (cluster_tls.h), the CA also as LOG_DIR/ca.pem.
  // Without it every process runs with --insecure (plain text on loopback).
  bool tls = false;
  std::string api_keys_file;            // the router's --api-keys-file ("" : no keys)
  // The router tells clients node addresses and paths (--expose-topology): the user of a local
  // cluster owns every process.
  bool expose_topology = true;
};

struct ClusterProcess {
  std::string role;     // "prefill", "decode", "router", "proposer"
  std::string address;  // host:port once ready
  std::string metrics_address;  // host:port of its /metrics, with ClusterOptions::metrics
  std::string http_url; // router with an HTTP port: its base URL (http(s)://HOST:PORT/v1)
  std::vector<std::string> argv;
  std::unique_ptr<Subprocess> process;
};

class LocalCluster {
 public:
  // Starts every process and waits until each is ready. On failure everything started is stopped
  // and the error carries the failing process's log tail.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> start(const ClusterOptions& options);
  ~LocalCluster();

  const std::string& router_address() const { return router_->address; }
  // http(s)://HOST:PORT/v1 when started with http_port; else "".
  const std::string& router_http_url() const { return router_->http_url; }
  // With ClusterOptions::tls: the CA certificate clients verify the router with (--tls-ca); else "".
  const std::string& ca_file() const { return ca_file_; }
  std::vector<ClusterProcess*> nodes(const std::string& role);
  ClusterProcess& router() { return *router_; }
  // Every process's /metrics endpoint (ClusterOptions::metrics), for a Prometheus file_sd file.
  std::vector<metrics::ScrapeTarget> scrape_targets() const;
  // The proposer sidecar, when started with proposer_sidecar; nullptr otherwise.
  ClusterProcess* proposer() { return proposer_.get(); }
  // Starts a process again with the same flags (a restarted node gets a new port unless fixed;
  // the router learns it by registration or polling). Returns its new address.
  absl::StatusOr<std::string> restart(ClusterProcess& p);
  // Stops the router, then the nodes, then the proposer sidecar (SIGTERM, then SIGKILL after a
  // grace period).
  void stop();
  // The path of a node or router binary: in bin_dir (or beside this executable), directly or in
  // the build tree's prefill_node/, decode_node/, proposer_node/, router/ or cli/.
  static absl::StatusOr<std::string> find_binary(const std::string& name, const std::string& bin_dir);

 private:
  LocalCluster() = default;
  absl::Status spawn(ClusterProcess& p, const std::string& name);
  absl::Status await_ready(ClusterProcess& p, const std::string& name);
  absl::Status launch(ClusterProcess& p, const std::string& name);  // spawn + await_ready

  ClusterOptions options_;
  std::vector<std::unique_ptr<ClusterProcess>> nodes_;
  std::unique_ptr<ClusterProcess> router_;
  std::unique_ptr<ClusterProcess> proposer_;
  std::string ca_file_;
};

// The decode nodes' speculative config with proposer_endpoint set to `endpoint`; InvalidArgument
// unless it is a JSON object with method ngram or suffix (the sidecar has no model).
absl::StatusOr<std::string> with_proposer_endpoint(const std::string& speculative_config, const std::string& endpoint);

}  // namespace baton::cli
