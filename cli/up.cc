#include "cli/up.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/bundled_files.h"
#include "cli/cluster.h"
#include "common/flags.h"
#include "common/status.h"
#include "engine/spec/kv_transfer_config.h"
#include "engine/spec/rejection_sampler_config.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

namespace {

const std::vector<FlagSpec>& up_flags() {
  static const std::vector<FlagSpec> flags = {
      {"model", "DIR", "target model directory (default: the bundled baton-tiny-code family, drafting with its EAGLE-3 head)"},
      {"prefill", "N", "prefill nodes (default 1; 0: decode nodes prefill locally)"},
      {"decode", "M", "decode nodes (default 1)"},
      {"speculative-config", "JSON", "the decode nodes' speculative config (prefill nodes run it with k = 1)"},
      {"additional-config", "JSON",
       "vLLM Ascend's flag: its rejection_sampler_config (LOSSY entropy verification) joins --speculative-config"},
      {"kv-transfer-config", "JSON",
       "vLLM's flag, for speculative method extract_hidden_states: where every node writes its hidden-states files "
       "(kv_connector_extra_config.shared_storage_path)"},
      {"port", "P", "the router's port (default 50051; 0: any free port)"},
      {"http-port", "P", "also serve the OpenAI-compatible HTTP API on this port (0: any free port)"},
      {"host", "HOST", "address every process listens on (default 127.0.0.1)"},
      {"transport", "T", "KV transport: ucx or grpc (default ucx)"},
      {"threads", "N", "CPU threads per node (default: cores / nodes)"},
      {"kv-cache-memory", "GIB", "KV cache per node in GiB (default 1)"},
      {"no-enable-prefix-caching", "", "the nodes keep no prefix cache (vLLM's flag; on by default)"},
      {"proposer-sidecar", "", "start a baton-proposer and let every decode node draft through it (speculative "
                               "method ngram or suffix; the suffix cache is then shared by all decode nodes)"},
      {"local-prefill-max-tokens", "N", "prompts this short prefill on the decode node (default 0: never)"},
      {"served-model-name", "NAME", "the model id clients send (OpenAI's \"model\"; default: the model directory's "
                                    "base name)"},
      {"chat-template", "FILE|TEMPLATE", "the router's chat template (a file, or the template itself) instead of the "
                                         "model's tokenizer_config.json one"},
      {"max-running-requests", "N", "the router's admission limit (default: derived from the decode nodes; "
                                    "docs/serving.md#admission-limits)"},
      {"max-queued-requests", "N", "requests that wait for room at the router (default: derived likewise)"},
      {"tool-call-parser", "NAME", "the router's tool-call parser for the HTTP API: hermes or llama3_json"},
      {"enable-auto-tool-choice", "", "the router serves tool_choice \"auto\" (needs --tool-call-parser)"},
      {"metrics", "", "every process serves Prometheus metrics at /metrics on a free port (printed)"},
      {"prometheus-targets", "FILE", "with --metrics implied: write a Prometheus file_sd JSON listing every process's "
                                     "metrics endpoint (role and node labels) and print its path"},
      {"tls", "", "encrypt every connection: a throwaway CA and one certificate per process (mutual TLS inside the "
                  "cluster, TLS on the router's ports); the CA certificate is written to LOG_DIR/ca.pem for clients' "
                  "--tls-ca"},
      {"api-keys-file", "FILE", "the router's API keys, one per line (clients send one as 'Bearer KEY'; "
                                "baton generate reads it from BATON_API_KEY)"},
      {"log-dir", "DIR", "where each process writes its log (default: a new folder under /tmp)"},
      {"bin-dir", "DIR", "where baton-prefill, baton-decode and baton-router are (default: next to baton)"},
      {"help", "", "show this help"},
  };
  return flags;
}

constexpr const char* kSynopsis =
    "[--model DIR] [--prefill N] [--decode M] [--speculative-config JSON] [--port P] [--transport ucx|grpc]\n\n"
    "Starts a local cluster on this machine: M decode nodes, N prefill nodes and a router, as child\n"
    "processes. Prints the router's address once every node is ready; Ctrl-C stops them all.\n"
    "Then: baton generate --endpoint HOST:PORT --prompt \"...\"\n"
    "With --http-port: OpenAI clients at the printed base URL (docs/openai-api.md).";

int fail(const absl::Status& s) {
  std::fprintf(stderr, "baton up: %s\n", std::string(s.message()).c_str());
  return 1;
}

// The router's ports are checked before any node starts: a port in use would otherwise surface as
// the router's exit (with gRPC core's own error) after the nodes had loaded their models.
absl::Status check_port_free(const std::string& host, int port, const char* flag) {
  if (port == 0) return absl::OkStatus();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::InvalidArgumentError(str_cat("--host ", host, ": not an address this machine can resolve"));
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as the router binds: TIME_WAIT is no conflict
  const int bound = fd >= 0 ? ::bind(fd, found->ai_addr, found->ai_addrlen) : -1;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (bound == 0) return absl::OkStatus();
  if (error == EADDRINUSE) {
    return absl::FailedPreconditionError(str_cat(flag, " ", port, ": ", host, ":", port,
                                                 " is in use (another baton up?); stop it, or give another ", flag,
                                                 " (0: any free port)"));
  }
  return absl::FailedPreconditionError(str_cat(flag, " ", port, ": cannot listen on ", host, ":", port, ": ",
                                               std::strerror(error)));
}

absl::StatusOr<ClusterOptions> options_from_flags(const ParsedFlags& f) {
  ClusterOptions o;
  if (f.has("model")) {
    o.model_dir = *f.get("model");
  } else {
    BATON_ASSIGN_OR_RETURN(const std::string family, bundled_model_family());
    o.model_dir = family + "/target";
    if (!f.has("speculative-config")) {
      o.speculative_config = str_cat(R"({"method":"eagle3","model":")", family, R"(/eagle3","num_speculative_tokens":4})");
    }
  }
  if (auto spec = f.get("speculative-config")) o.speculative_config = *spec;
  if (auto additional = f.get("additional-config")) {
    nlohmann::json spec;
    if (o.speculative_config) {
      spec = nlohmann::json::parse(*o.speculative_config, nullptr, /*allow_exceptions=*/false);
      if (!spec.is_object()) return absl::InvalidArgumentError("--speculative-config must be a JSON object");
    }
    BATON_RETURN_IF_ERROR(merge_additional_config(*additional, o.speculative_config ? &spec : nullptr));
    if (o.speculative_config) o.speculative_config = spec.dump();
  }
  BATON_ASSIGN_OR_RETURN(auto prefill, f.get_int("prefill"));
  BATON_ASSIGN_OR_RETURN(auto decode, f.get_int("decode"));
  BATON_ASSIGN_OR_RETURN(auto port, f.get_int("port"));
  BATON_ASSIGN_OR_RETURN(auto threads, f.get_int("threads"));
  BATON_ASSIGN_OR_RETURN(auto http_port, f.get_int("http-port"));
  if (http_port) {
    if (*http_port < 0 || *http_port > 65535) return absl::InvalidArgumentError("--http-port must be in [0, 65535]");
    o.http_port = static_cast<int>(*http_port);
  }
  o.num_prefill = static_cast<int>(prefill.value_or(1));
  o.num_decode = static_cast<int>(decode.value_or(1));
  o.router_port = static_cast<int>(port.value_or(50051));
  o.threads_per_node = static_cast<int>(threads.value_or(0));
  o.host = f.get("host").value_or("127.0.0.1");
  o.transport = f.get("transport").value_or("ucx");
  if (o.transport != "ucx" && o.transport != "grpc") {
    return absl::InvalidArgumentError(str_cat("--transport must be ucx or grpc, got '", o.transport, "'"));
  }
  if (auto kv = f.get("kv-cache-memory")) o.node_args = {"--kv-cache-memory", *kv};
  if (f.has("no-enable-prefix-caching")) o.node_args.push_back("--no-enable-prefix-caching");
  if (auto kv = f.get("kv-transfer-config")) {
    // Checked here so that a mistake is one message, not one per node; the nodes check it again.
    BATON_RETURN_IF_ERROR(parse_kv_transfer_config(*kv).status());
    o.node_args.insert(o.node_args.end(), {"--kv-transfer-config", *kv});
  }
  // The router's own flags, passed through as given (the router checks them).
  for (const char* flag : {"local-prefill-max-tokens", "served-model-name", "chat-template", "max-running-requests",
                           "max-queued-requests", "tool-call-parser"}) {
    if (auto v = f.get(flag)) {
      o.router_args.push_back(str_cat("--", flag));
      o.router_args.push_back(*v);
    }
  }
  if (f.has("enable-auto-tool-choice")) o.router_args.push_back("--enable-auto-tool-choice");
  o.metrics = f.has("metrics") || f.has("prometheus-targets");
  o.proposer_sidecar = f.has("proposer-sidecar");
  o.bin_dir = f.get("bin-dir").value_or("");
  o.tls = f.has("tls");
  o.api_keys_file = f.get("api-keys-file").value_or("");
  o.log_dir = f.get("log-dir").value_or(
      (std::filesystem::temp_directory_path() / str_cat("baton-up-", ::getpid())).string());
  return o;
}

}  // namespace

int up_main(int argc, char** argv) {
  // Ctrl-C and SIGTERM are read from a signalfd (with the children's exits, in one poll), so they
  // are blocked first; children get the default mask back.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto parsed = parse_flags(up_flags(), argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "baton up: %s\n\n%s", std::string(parsed.status().message()).c_str(),
                 usage("baton up", kSynopsis, up_flags()).c_str());
    return 2;
  }
  if (parsed->has("help")) {
    std::printf("%s", usage("baton up", kSynopsis, up_flags()).c_str());
    return 0;
  }
  auto options = options_from_flags(*parsed);
  if (!options.ok()) return fail(options.status());
  if (absl::Status s = check_port_free(options->host, options->router_port, "--port"); !s.ok()) return fail(s);
  if (options->http_port) {
    if (absl::Status s = check_port_free(options->host, *options->http_port, "--http-port"); !s.ok()) return fail(s);
  }
  std::fprintf(stderr, "baton up: starting %d decode and %d prefill node(s) of %s (logs in %s)\n", options->num_decode,
               options->num_prefill, options->model_dir.c_str(), options->log_dir.c_str());
  auto cluster = LocalCluster::start(*options);
  if (!cluster.ok()) return fail(cluster.status());
  std::printf("baton up: router ready on %s (%d prefill, %d decode; logs in %s). Ctrl-C stops the cluster.\n",
              (*cluster)->router_address().c_str(), options->num_prefill, options->num_decode, options->log_dir.c_str());
  if (!(*cluster)->ca_file().empty()) {
    std::printf("baton up: TLS on every connection; clients verify the router with --tls-ca %s\n",
                (*cluster)->ca_file().c_str());
  }
  if (options->metrics) {
    for (const metrics::ScrapeTarget& t : (*cluster)->scrape_targets()) {
      std::printf("baton up: %s %s metrics on %s://%s/metrics\n", t.role.c_str(), t.node.c_str(),
                  options->tls ? "https" : "http", t.metrics_address.c_str());
    }
  }
  if (auto targets = parsed->get("prometheus-targets")) {
    if (absl::Status s = metrics::write_targets_file(*targets, (*cluster)->scrape_targets()); !s.ok()) return fail(s);
    std::printf("baton up: Prometheus targets in %s (file_sd_configs; scrape with honor_labels: true)\n",
                std::filesystem::absolute(*targets).c_str());
  }
  if (!(*cluster)->router_http_url().empty()) {
    const std::string& api = (*cluster)->router_http_url();  // http(s)://HOST:PORT/v1
    std::printf("baton up: OpenAI API on %s (GET /v1/models names the model)\n", api.c_str());
    std::printf("baton up: live page on %s/dashboard\n", api.substr(0, api.size() - 3).c_str());
  }
  if (ClusterProcess* proposer = (*cluster)->proposer()) {
    std::printf("baton up: proposer sidecar on %s\n", proposer->address.c_str());
  }
  std::fflush(stdout);

  const int sfd = signalfd(-1, &signals, SFD_CLOEXEC);
  std::vector<pollfd> fds = {{sfd, POLLIN, 0}};
  std::vector<ClusterProcess*> all = {&(*cluster)->router()};
  for (const char* role : {"decode", "prefill"}) {
    for (ClusterProcess* p : (*cluster)->nodes(role)) all.push_back(p);
  }
  // A lost sidecar is reported like a lost node; decode nodes draft locally meanwhile.
  if (ClusterProcess* proposer = (*cluster)->proposer()) all.push_back(proposer);
  for (ClusterProcess* p : all) fds.push_back({p->process->pidfd(), POLLIN, 0});
  int code = 0;
  while (::poll(fds.data(), fds.size(), -1) >= 0 || errno == EINTR) {
    if (fds[0].revents & POLLIN) break;  // Ctrl-C / SIGTERM
    bool router_gone = false;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      ClusterProcess* p = all[i - 1];
      std::fprintf(stderr, "baton up: %s %s exited (status %d); its last output:\n%s", p->role.c_str(), p->address.c_str(),
                   p->process->wait(std::chrono::milliseconds(1000)).value_or(-1), p->process->log_tail(20).c_str());
      fds[i].fd = -1;  // poll ignores it from now on
      router_gone |= p->role == "router";
    }
    if (router_gone) {
      code = 1;
      break;
    }
  }
  std::fprintf(stderr, "baton up: stopping\n");
  (*cluster)->stop();
  ::close(sfd);
  return code;
}

}  // namespace baton::cli
