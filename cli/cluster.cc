#include "cli/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "cli/cluster_tls.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "nlohmann/json.hpp"
#include "node_common/node_info.h"

namespace baton::cli {

namespace {

constexpr const char* kReady = " ready on ";
constexpr const char* kHttpOn = "baton-router http on ";

// "<binary> ready on HOST:PORT (...)" -> HOST:PORT
std::string address_of(const std::string& line) {
  const std::size_t at = line.find(kReady);
  std::string rest = line.substr(at + std::string(kReady).size());
  return rest.substr(0, rest.find(' '));
}

// The prefill nodes' config: the decode nodes' with num_speculative_tokens = 1 for attention
// models, the same k for hybrid models with recurrent layers (the P/D rule; the node itself
// rejects anything else).
absl::StatusOr<std::string> prefill_config(const std::string& decode_config, bool hybrid) {
  nlohmann::json j = nlohmann::json::parse(decode_config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("--speculative-config must be a JSON object");
  }
  if (!hybrid) j["num_speculative_tokens"] = 1;
  // Prefill nodes draft one token locally; the sidecar is the decode nodes'.
  j.erase("proposer_endpoint");
  j.erase("proposer_budget_ms");
  return j.dump();
}

}  // namespace

absl::StatusOr<std::string> with_proposer_endpoint(const std::string& speculative_config, const std::string& endpoint) {
  nlohmann::json j = nlohmann::json::parse(speculative_config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("--speculative-config must be a JSON object");
  }
  const std::string method = j.contains("method") && j["method"].is_string() ? j["method"].get<std::string>() : "";
  if (method != "ngram" && method != "suffix") {
    return absl::InvalidArgumentError(str_cat("--proposer-sidecar needs a speculative config with method ngram or suffix ",
                                              "(the sidecar has no model); the method is '", method, "'"));
  }
  j["proposer_endpoint"] = endpoint;
  return j.dump();
}

absl::StatusOr<std::string> LocalCluster::find_binary(const std::string& name, const std::string& bin_dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec).parent_path();
  // An install puts them side by side; a build tree keeps one folder per binary.
  for (const fs::path& dir : {bin_dir.empty() ? self : fs::path(bin_dir), bin_dir.empty() ? self / ".." : fs::path(bin_dir)}) {
    candidates.push_back(dir / name);
    for (const char* sub : {"prefill_node", "decode_node", "proposer_node", "router", "cli"}) candidates.push_back(dir / sub / name);
  }
  for (const fs::path& p : candidates) {
    if (::access(p.c_str(), X_OK) == 0) return fs::weakly_canonical(p).string();
  }
  return absl::NotFoundError(str_cat("cannot find the ", name, " binary (looked in ",
                                     candidates.front().parent_path().string(), "; build it, or give --bin-dir)"));
}

absl::Status LocalCluster::spawn(ClusterProcess& p, const std::string& name) {
  Subprocess::Options o;
  o.argv = p.argv;
  o.log_path = (std::filesystem::path(options_.log_dir) / (name + ".log")).string();
  o.env = options_.env;
  o.echo = options_.echo_logs;
  BATON_ASSIGN_OR_RETURN(p.process, Subprocess::start(std::move(o)));
  return absl::OkStatus();
}

absl::Status LocalCluster::launch(ClusterProcess& p, const std::string& name) {
  BATON_RETURN_IF_ERROR(spawn(p, name));
  return await_ready(p, name);
}

absl::Status LocalCluster::await_ready(ClusterProcess& p, const std::string& name) {
  auto line = p.process->wait_for_line(kReady, options_.start_timeout);
  if (!line.ok()) {
    return absl::Status(line.status().code(), str_cat(name, " failed to start (log: ", options_.log_dir, "/", name,
                                                      ".log): ", line.status().message()));
  }
  p.address = address_of(*line);
  if (options_.metrics) {
    // Printed before the ready line, so it is there already.
    constexpr std::string_view kMetrics = " metrics on http";
    auto m = p.process->wait_for_line(kMetrics, std::chrono::seconds(1));
    if (!m.ok()) return absl::Status(m.status().code(), str_cat(name, " printed no metrics address: ", m.status().message()));
    std::string rest = m->substr(m->find("://", m->find(kMetrics)) + 3);
    p.metrics_address = rest.substr(0, rest.find('/'));
  }
  // The router prints its HTTP line before "ready on": it is in the output already.
  if (p.role == "router" && options_.http_port) {
    auto http = p.process->wait_for_line(kHttpOn, std::chrono::seconds(1));
    if (!http.ok()) return absl::InternalError(str_cat(name, " printed no '", kHttpOn, "' line"));
    std::string url = http->substr(http->find(kHttpOn) + std::string(kHttpOn).size());
    p.http_url = url.substr(0, url.find_first_of(" \r\n"));
  }
  return absl::OkStatus();
}

std::vector<metrics::ScrapeTarget> LocalCluster::scrape_targets() const {
  std::vector<metrics::ScrapeTarget> out;
  for (const auto& n : nodes_) {
    if (!n->metrics_address.empty()) out.push_back({n->metrics_address, n->role, n->address});
  }
  if (proposer_ && !proposer_->metrics_address.empty()) {
    out.push_back({proposer_->metrics_address, "proposer", proposer_->address});
  }
  if (router_ && !router_->metrics_address.empty()) out.push_back({router_->metrics_address, "router", router_->address});
  return out;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::start(const ClusterOptions& options) {
  if (options.num_decode < 1) return absl::InvalidArgumentError("a cluster needs at least one decode node");
  if (options.num_prefill < 0) return absl::InvalidArgumentError("--prefill must be >= 0");
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->options_ = options;
  std::filesystem::create_directories(options.log_dir);
  BATON_ASSIGN_OR_RETURN(const std::string prefill_bin, find_binary(options.prefill_binary, options.bin_dir));
  BATON_ASSIGN_OR_RETURN(const std::string decode_bin, find_binary(options.decode_binary, options.bin_dir));
  BATON_ASSIGN_OR_RETURN(const std::string router_bin, find_binary("baton-router", options.bin_dir));
  const int nodes = options.num_prefill + options.num_decode;
  // Every process's name (its log file, and its certificate with --tls).
  std::vector<std::string> names;
  for (int i = 0; i < options.num_decode; ++i) names.push_back(str_cat("decode-", i));
  for (int i = 0; i < options.num_prefill; ++i) names.push_back(str_cat("prefill-", i));
  std::optional<ClusterTlsFiles> tls;
  if (options.tls) {
    std::vector<std::string> all = names;
    all.insert(all.end(), {"router", "proposer"});
    BATON_ASSIGN_OR_RETURN(tls, make_cluster_tls((std::filesystem::path(options.log_dir) / "tls").string(), all,
                                                 options.host));
    c->ca_file_ = (std::filesystem::path(options.log_dir) / "ca.pem").string();
    std::filesystem::copy_file(tls->ca_file, c->ca_file_, std::filesystem::copy_options::overwrite_existing);
  }
  const auto security_args = [&](const std::string& name) {
    return tls ? tls->flags_for(name) : std::vector<std::string>{"--insecure"};
  };
  const int threads = options.threads_per_node > 0
                          ? options.threads_per_node
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / nodes);
  // The name clients use for the model (the router's --served-model-name, else the model
  // directory's base name, as the router derives it): every process labels its metrics with it.
  std::string served_model_name = model_name_of(options.model_dir);
  for (std::size_t i = 0; i + 1 < options.router_args.size(); ++i) {
    if (options.router_args[i] == "--served-model-name") served_model_name = options.router_args[i + 1];
  }
  const auto node_argv = [&](const std::string& bin, const std::string& name, const std::optional<std::string>& spec,
                             const std::vector<std::string>& extra) {
    std::vector<std::string> a = {bin, "--model", options.model_dir, "--served-model-name", served_model_name,
                                  "--host", options.host, "--port", "0", "--threads", std::to_string(threads)};
    const std::vector<std::string> security = security_args(name);
    a.insert(a.end(), security.begin(), security.end());
    if (spec) a.insert(a.end(), {"--speculative-config", *spec});
    if (options.metrics) a.insert(a.end(), {"--metrics-port", "0"});
    a.insert(a.end(), options.node_args.begin(), options.node_args.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  std::optional<std::string> p_spec;
  std::optional<std::string> d_spec = options.speculative_config;
  if (options.speculative_config) {
    // An unreadable config is the nodes' to report, with its reason.
    auto model = ModelConfig::load(options.model_dir);
    BATON_ASSIGN_OR_RETURN(p_spec, prefill_config(*options.speculative_config, model.ok() && model->has_recurrent_layers));
  }
  if (options.proposer_sidecar) {
    if (!d_spec) {
      return absl::InvalidArgumentError("--proposer-sidecar needs --speculative-config with method ngram or suffix");
    }
    BATON_RETURN_IF_ERROR(with_proposer_endpoint(*d_spec, "127.0.0.1:1").status());  // checks the method first
    BATON_ASSIGN_OR_RETURN(const std::string proposer_bin, find_binary("baton-proposer", options.bin_dir));
    c->proposer_ = std::make_unique<ClusterProcess>();
    c->proposer_->role = "proposer";
    c->proposer_->argv = {proposer_bin, "--host", options.host, "--port", "0", "--served-model-name", served_model_name};
    const std::vector<std::string> security = security_args("proposer");
    c->proposer_->argv.insert(c->proposer_->argv.end(), security.begin(), security.end());
    if (options.metrics) c->proposer_->argv.insert(c->proposer_->argv.end(), {"--metrics-port", "0"});
    c->proposer_->argv.insert(c->proposer_->argv.end(), options.proposer_args.begin(), options.proposer_args.end());
    BATON_RETURN_IF_ERROR(c->launch(*c->proposer_, "proposer"));
    BATON_ASSIGN_OR_RETURN(d_spec, with_proposer_endpoint(*d_spec, c->proposer_->address));
  }
  const std::string transports = options.transport == "grpc" ? "grpc,ucx" : "ucx,grpc";
  // Start every node at once (each loads the model), then wait for each.
  for (int i = 0; i < options.num_decode; ++i) {
    auto p = std::make_unique<ClusterProcess>();
    p->role = "decode";
    p->argv = node_argv(decode_bin, names[c->nodes_.size()], d_spec, options.decode_args);
    p->argv.insert(p->argv.end(), {"--transport", transports});
    c->nodes_.push_back(std::move(p));
  }
  for (int i = 0; i < options.num_prefill; ++i) {
    auto p = std::make_unique<ClusterProcess>();
    p->role = "prefill";
    p->argv = node_argv(prefill_bin, names[c->nodes_.size()], p_spec, options.prefill_args);
    c->nodes_.push_back(std::move(p));
  }
  for (std::size_t i = 0; i < c->nodes_.size(); ++i) BATON_RETURN_IF_ERROR(c->spawn(*c->nodes_[i], names[i]));
  for (std::size_t i = 0; i < c->nodes_.size(); ++i) BATON_RETURN_IF_ERROR(c->await_ready(*c->nodes_[i], names[i]));

  c->router_ = std::make_unique<ClusterProcess>();
  c->router_->role = "router";
  c->router_->argv = {router_bin, "--model", options.model_dir, "--host", options.host, "--port",
                      std::to_string(options.router_port)};
  for (auto& n : c->nodes_) c->router_->argv.insert(c->router_->argv.end(), {"--" + n->role, n->address});
  if (options.expose_topology) c->router_->argv.push_back("--expose-topology");
  const std::vector<std::string> router_security = security_args("router");
  c->router_->argv.insert(c->router_->argv.end(), router_security.begin(), router_security.end());
  if (!options.api_keys_file.empty()) {
    c->router_->argv.insert(c->router_->argv.end(), {"--api-keys-file", options.api_keys_file});
  }
  if (options.metrics) c->router_->argv.insert(c->router_->argv.end(), {"--metrics-port", "0"});
  if (options.http_port) {
    c->router_->argv.insert(c->router_->argv.end(), {"--http-port", std::to_string(*options.http_port)});
  }
  c->router_->argv.insert(c->router_->argv.end(), options.router_args.begin(), options.router_args.end());
  BATON_RETURN_IF_ERROR(c->launch(*c->router_, "router"));
  return c;
}

std::vector<ClusterProcess*> LocalCluster::nodes(const std::string& role) {
  std::vector<ClusterProcess*> out;
  for (auto& n : nodes_) {
    if (n->role == role) out.push_back(n.get());
  }
  return out;
}

absl::StatusOr<std::string> LocalCluster::restart(ClusterProcess& p) {
  if (p.process) p.process->terminate();
  // Same flags, same port: whoever knew the old address finds the new process there.
  auto port = std::find(p.argv.begin(), p.argv.end(), "--port");
  if (port != p.argv.end() && !p.address.empty()) *(port + 1) = p.address.substr(p.address.rfind(':') + 1);
  BATON_RETURN_IF_ERROR(launch(p, p.role + "-restarted"));
  return p.address;
}

void LocalCluster::stop() {
  if (router_ && router_->process) router_->process->terminate();
  for (auto& n : nodes_) {
    if (n->process) n->process->terminate();
  }
  if (proposer_ && proposer_->process) proposer_->process->terminate();
}

LocalCluster::~LocalCluster() { stop(); }

}  // namespace baton::cli
