// baton-router: parses flags, starts RouterService, prints the bound address, and serves until
// SIGINT or SIGTERM, then drains: NOT_SERVING, new requests refused, running ones given up to
// --drain-timeout-ms to finish. Logic lives in the baton_router library.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "proto/grpc_exit.h"
#include "router/http/http_server.h"
#include "router/router_service.h"
#include "security/grpc_credentials.h"

namespace {

using baton::FlagSpec;

const std::vector<FlagSpec> kFlags = {
    {"port", "P", "port to serve on (0 = pick a free one; default 0); the bound address is printed"},
    {"host", "HOST", "address to listen on (default 127.0.0.1)"},
    {"model", "DIR", "model directory, for its tokenizer files only (without them: token-id mode)"},
    {"prefill", "HOST:PORT", "a prefill node (repeat the flag or separate with commas)"},
    {"decode", "HOST:PORT", "a decode node (repeat the flag or separate with commas)"},
    {"prefill-dns", "NAME:PORT", "discover prefill nodes by DNS: every address NAME resolves to (e.g. a Kubernetes "
                                 "headless Service) is a prefill node on PORT (repeatable, or comma-separated)"},
    {"decode-dns", "NAME:PORT", "discover decode nodes by DNS, as --prefill-dns"},
    {"dns-refresh-ms", "MS", "how often --prefill-dns / --decode-dns names are looked up again (default 5000)"},
    {"dns-family", "FAMILY", "which addresses DNS discovery uses: any (default), ipv4 or ipv6"},
    {"forget-unreachable-ms", "MS", "a registered or DNS-discovered node unreachable this long leaves the pool "
                                    "(default 60000; 0: never); --prefill/--decode nodes are never forgotten"},
    {"drain-timeout-ms", "MS", "on SIGTERM, how long running requests may take to finish before they are "
                               "cancelled (default 30000); new requests are refused at once"},
    {"local-prefill-max-tokens", "N", "prompts of at most N tokens prefill on the decode node (default 0: always "
                                      "disaggregate when a prefill node pairs)"},
    {"no-local-fallback", "", "never prefill on a decode node because no prefill node is usable: fail with "
                              "UNAVAILABLE instead"},
    {"poll-interval-ms", "MS", "how often each node's health and Info are polled (default 500)"},
    {"node-timeout-ms", "MS", "deadline of each node control call: Info, Reserve (default 5000)"},
    {"health-timeout-ms", "MS", "deadline of each node health check; a node that misses one takes no new "
                                "requests until it answers again, and one that misses two in a row has its "
                                "running calls ended and retried elsewhere where they can be (default 1000)"},
    {"stream-progress-timeout-ms", "MS", "a decode node's stream that sends nothing for this long ends with "
                                         "UNAVAILABLE and is aborted on the node (default 30000; 0: never)"},
    {"prefill-timeout-ms", "MS", "deadline of one Prefill call (default 60000)"},
    {"commit-timeout-ms", "MS", "how long a decode node waits for the prefill node's commit (default 60000)"},
    {"request-timeout-ms", "MS", "deadline of a whole request (default 600000)"},
    {"metrics-port", "P", "serve Prometheus metrics at http://HOST:P/metrics (0: any free port, printed)"},
    {"internal-port", "P", "serve the node registry (nodes' --register-with) on this port, to cluster members only "
                           "(mutual TLS with --tls-ca); 0: any free port, printed. Without it nodes come from "
                           "--prefill/--decode or DNS only"},
    {"internal-host", "HOST", "address the registry listens on (default: --host), e.g. the cluster network's"},
    {"max-registered-nodes", "N", "registered nodes the router keeps at most; more are refused (default 256)"},
    {"served-model-name", "NAME", "the model id of the OpenAI API and GetModelInfo (default: --model's base name)"},
    {"chat-template", "FILE|TEMPLATE", "a Jinja chat template (a file, or the template itself) for chat requests, "
                                       "instead of --model's tokenizer_config.json one"},
    {"max-running-requests", "N", "requests running at once; more wait for room, else are refused (gRPC "
                                  "RESOURCE_EXHAUSTED, HTTP 429). Default: twice the decode nodes' batch slots, "
                                  "min(--max-num-seqs, KV blocks) each, followed as nodes come and go; 0: no limit"},
    {"max-running-requests-per-key", "N", "requests one API key runs at once; more are refused like the above "
                                          "(default 256; 0: no limit)"},
    {"max-queued-requests", "N", "requests that wait for room when the limits above are reached (default: the "
                                 "decode nodes' batch slots, at least 16); a "
                                 "freed slot goes to the key running the fewest. More, or one that waited "
                                 "--queue-timeout-ms, are refused like the above; 0: refuse at once"},
    {"queue-timeout-ms", "MS", "the longest a request waits for room (default 30000)"},
    {"expose-topology", "", "tell clients node addresses (errors, usage) and file paths (model info); default: "
                            "hidden"},
    {"max-request-bytes", "N", "largest HTTP body or gRPC message taken (default 16777216); larger: HTTP 413, gRPC "
                               "RESOURCE_EXHAUSTED"},
    {"max-prompt-bytes", "N", "largest prompt text (or chat contents) taken before tokenizing (default 8388608, and "
                              "at most 64 bytes per token of max_model_len)"},
    {"max-stop-strings", "N", "stop strings a request may give (default 64; at most 1024)"},
    {"max-stop-string-bytes", "N", "bytes of one stop string (default 1024, the most)"},
    {"http-port", "P", "also serve the OpenAI-compatible HTTP API on this port (0 = pick a free one); the base "
                       "URL is printed"},
    {"max-http-connections", "N", "HTTP connections open at once (default 16384, and at most the open-file limit "
                                  "less 1024); one more is answered 503 and closed"},
    {"http-idle-timeout-ms", "MS", "an idle keep-alive HTTP connection is closed after MS (default 60000)"},
    {"http-header-timeout-ms", "MS", "an HTTP request's header must arrive within MS of its first byte, its body "
                                     "within 60 s (default 10000); slower clients are disconnected"},
    {"tool-call-parser", "NAME", "how the HTTP API reads tool calls from a chat's output: hermes (Qwen 2.5/3, "
                                 "Hermes: <tool_call> blocks) or llama3_json (Llama 3.1+)"},
    {"enable-auto-tool-choice", "", "serve tool_choice \"auto\" (the default with tools), reading calls with "
                                    "--tool-call-parser; without it, chats with tools need tool_choice \"none\", "
                                    "\"required\" or a function"},
    {"public-dashboard", "", "serve /dashboard and /metrics without an API key (they show counts, latencies "
                             "and node addresses, no prompt or output)"},
    {"api-keys-file", "FILE", "the public API's keys (gRPC and HTTP), one per line, or 'sha256:HEX' of one; "
                              "clients send 'authorization: Bearer KEY'"},
};

std::vector<FlagSpec> all_flags() {
  std::vector<FlagSpec> f = kFlags;
  const std::vector<FlagSpec> tls = baton::security::tls_flag_specs();
  f.insert(f.end(), tls.begin(), tls.end());
  f.insert(f.end(), {{"log-level", "LEVEL", "trace, debug, info, warn, error (default info)"},
                     {"help", "", "show this help"}});
  return f;
}

constexpr const char* kSynopsis =
    "--decode HOST:PORT | --decode-dns NAME:PORT [--prefill HOST:PORT | --prefill-dns NAME:PORT] [--model DIR] [flags]";

std::vector<std::string> addresses(const baton::ParsedFlags& f, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& v : f.get_all(name)) {
    for (absl::string_view a : absl::StrSplit(v, ',', absl::SkipWhitespace())) out.emplace_back(a);
  }
  return out;
}

absl::Status read_ms(const baton::ParsedFlags& f, const std::string& name, std::chrono::milliseconds* out) {
  BATON_ASSIGN_OR_RETURN(auto v, f.get_int(name));
  if (!v) return absl::OkStatus();
  if (*v <= 0) return absl::InvalidArgumentError(baton::str_cat("--", name, " must be positive, got ", *v));
  *out = std::chrono::milliseconds(*v);
  return absl::OkStatus();
}

absl::StatusOr<baton::router::RouterOptions> options_from_flags(const baton::ParsedFlags& f) {
  baton::router::RouterOptions o;
  BATON_ASSIGN_OR_RETURN(auto port, f.get_int("port"));
  if (port) {
    if (*port < 0 || *port > 65535) return absl::InvalidArgumentError("--port must be in [0, 65535]");
    o.port = static_cast<int>(*port);
  }
  if (auto host = f.get("host")) o.host = *host;
  if (auto model = f.get("model")) o.model_dir = *model;
  if (auto name = f.get("served-model-name")) o.served_model_name = *name;
  if (auto t = f.get("chat-template")) o.chat_template = *t;
  BATON_ASSIGN_OR_RETURN(auto max_running, f.get_int("max-running-requests"));
  if (max_running) {
    if (*max_running < 0) return absl::InvalidArgumentError("--max-running-requests must be >= 0");
    o.max_running_requests = static_cast<std::size_t>(*max_running);
  }
  BATON_ASSIGN_OR_RETURN(auto per_key, f.get_int("max-running-requests-per-key"));
  if (per_key) {
    if (*per_key < 0) return absl::InvalidArgumentError("--max-running-requests-per-key must be >= 0");
    o.max_running_requests_per_key = static_cast<std::size_t>(*per_key);
  }
  BATON_ASSIGN_OR_RETURN(auto max_queued, f.get_int("max-queued-requests"));
  if (max_queued) {
    if (*max_queued < 0 || *max_queued > (1 << 16)) {
      return absl::InvalidArgumentError("--max-queued-requests must be in [0, 65536]");
    }
    o.max_queued_requests = static_cast<std::size_t>(*max_queued);
  }
  BATON_ASSIGN_OR_RETURN(auto queue_timeout, f.get_int("queue-timeout-ms"));
  if (queue_timeout) {
    if (*queue_timeout < 1) return absl::InvalidArgumentError("--queue-timeout-ms must be >= 1");
    o.queue_timeout = std::chrono::milliseconds(*queue_timeout);
  }
  o.expose_topology = f.has("expose-topology");
  for (const auto& [flag, field, lo, hi] :
       {std::tuple{"max-request-bytes", &o.limits.max_request_bytes, std::int64_t{1024}, std::int64_t{1} << 30},
        std::tuple{"max-prompt-bytes", &o.limits.max_prompt_bytes, std::int64_t{1}, std::int64_t{1} << 30},
        std::tuple{"max-stop-strings", &o.limits.max_stop_strings, std::int64_t{0}, std::int64_t{1024}},
        std::tuple{"max-stop-string-bytes", &o.limits.max_stop_string_bytes, std::int64_t{1}, std::int64_t{1024}}}) {
    BATON_ASSIGN_OR_RETURN(auto v, f.get_int(flag));
    if (!v) continue;
    if (*v < lo || *v > hi) return absl::InvalidArgumentError(baton::str_cat("--", flag, " must be in [", lo, ", ", hi, "]"));
    *field = static_cast<std::size_t>(*v);
  }
  o.prefill_addresses = addresses(f, "prefill");
  o.decode_addresses = addresses(f, "decode");
  for (const auto& [flag, kind] : {std::pair{"prefill-dns", baton::router::NodeKind::kPrefill},
                                   std::pair{"decode-dns", baton::router::NodeKind::kDecode}}) {
    for (const std::string& text : addresses(f, flag)) {
      BATON_ASSIGN_OR_RETURN(auto target, baton::router::parse_dns_target(kind, text, flag));
      o.dns_targets.push_back(std::move(target));
    }
  }
  if (auto family = f.get("dns-family")) {
    BATON_ASSIGN_OR_RETURN(o.dns_family, baton::router::parse_address_family(*family));
  }
  BATON_RETURN_IF_ERROR(read_ms(f, "dns-refresh-ms", &o.dns_refresh));
  BATON_ASSIGN_OR_RETURN(auto forget, f.get_int("forget-unreachable-ms"));
  if (forget) {
    if (*forget < 0) return absl::InvalidArgumentError("--forget-unreachable-ms must be >= 0 (0: never)");
    o.forget_unreachable = std::chrono::milliseconds(*forget);
  }
  BATON_ASSIGN_OR_RETURN(auto local_max, f.get_int("local-prefill-max-tokens"));
  if (local_max) {
    if (*local_max < 0) return absl::InvalidArgumentError("--local-prefill-max-tokens must be >= 0");
    o.flow.local_prefill_max_tokens = *local_max;
  }
  o.flow.local_fallback = !f.has("no-local-fallback");
  BATON_ASSIGN_OR_RETURN(o.tls, baton::security::tls_config_from_flags(f, baton::security::TlsRole::kRouter));
  if (auto file = f.get("api-keys-file")) {
    BATON_ASSIGN_OR_RETURN(o.api_keys, baton::security::ApiKeys::from_file(*file));
  }
  o.public_dashboard = f.has("public-dashboard");
  BATON_ASSIGN_OR_RETURN(auto internal_port, f.get_int("internal-port"));
  if (internal_port) {
    if (*internal_port < 0 || *internal_port > 65535) return absl::InvalidArgumentError("--internal-port must be in [0, 65535]");
    o.internal_port = static_cast<int>(*internal_port);
  }
  if (auto host = f.get("internal-host")) o.internal_host = *host;
  BATON_ASSIGN_OR_RETURN(auto max_registered, f.get_int("max-registered-nodes"));
  if (max_registered) {
    if (*max_registered < 1 || *max_registered > 100000) {
      return absl::InvalidArgumentError("--max-registered-nodes must be in [1, 100000]");
    }
    o.max_registered_nodes = static_cast<std::size_t>(*max_registered);
  }
  BATON_ASSIGN_OR_RETURN(auto metrics_port, f.get_int("metrics-port"));
  if (metrics_port) {
    if (*metrics_port < 0 || *metrics_port > 65535) return absl::InvalidArgumentError("--metrics-port must be in [0, 65535]");
    o.metrics_port = static_cast<int>(*metrics_port);
  }
  BATON_RETURN_IF_ERROR(read_ms(f, "poll-interval-ms", &o.poll_interval));
  BATON_RETURN_IF_ERROR(read_ms(f, "node-timeout-ms", &o.flow.node_timeout));
  BATON_RETURN_IF_ERROR(read_ms(f, "health-timeout-ms", &o.health_timeout));
  BATON_RETURN_IF_ERROR(read_ms(f, "stream-progress-timeout-ms", &o.flow.progress_timeout));
  BATON_RETURN_IF_ERROR(read_ms(f, "prefill-timeout-ms", &o.flow.prefill_timeout));
  BATON_RETURN_IF_ERROR(read_ms(f, "commit-timeout-ms", &o.flow.commit_timeout));
  BATON_RETURN_IF_ERROR(read_ms(f, "request-timeout-ms", &o.flow.request_timeout));
  return o;
}

// The HTTP API's options; nullopt without --http-port.
absl::StatusOr<std::optional<baton::router::http::HttpOptions>> http_from_flags(const baton::ParsedFlags& f) {
  BATON_ASSIGN_OR_RETURN(auto port, f.get_int("http-port"));
  if (!port) return std::nullopt;
  if (*port < 0 || *port > 65535) return absl::InvalidArgumentError("--http-port must be in [0, 65535]");
  baton::router::http::HttpOptions o;
  o.port = static_cast<int>(*port);
  if (auto host = f.get("host")) o.host = *host;
  BATON_ASSIGN_OR_RETURN(auto connections, f.get_int("max-http-connections"));
  if (connections) {
    if (*connections < 1) return absl::InvalidArgumentError("--max-http-connections must be at least 1");
    o.max_connections = static_cast<std::size_t>(*connections);
  }
  BATON_RETURN_IF_ERROR(read_ms(f, "http-idle-timeout-ms", &o.idle_timeout));
  BATON_RETURN_IF_ERROR(read_ms(f, "http-header-timeout-ms", &o.header_timeout));
  if (auto parser = f.get("tool-call-parser")) {
    BATON_ASSIGN_OR_RETURN(o.tool_call_parser, baton::router::http::tool_call_format(*parser));
  }
  o.enable_auto_tool_choice = f.has("enable-auto-tool-choice");
  if (o.enable_auto_tool_choice && !o.tool_call_parser) {
    return absl::InvalidArgumentError("--enable-auto-tool-choice needs --tool-call-parser (hermes or llama3_json)");
  }
  return o;
}

// Raises this process's open-file limit to its hard limit (idle HTTP connections are cheap, but
// each is a descriptor) and caps max_connections to what it allows, keeping 1024 for the rest.
void fit_open_files(baton::router::http::HttpOptions& o) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
    (void)getrlimit(RLIMIT_NOFILE, &limit);
  }
  const std::size_t room = limit.rlim_cur > 2048 ? static_cast<std::size_t>(limit.rlim_cur) - 1024 : 1024;
  if (o.max_connections > room) {
    spdlog::warn("router: --max-http-connections {} lowered to {}: the open-file limit is {}", o.max_connections, room,
                 limit.rlim_cur);
    o.max_connections = room;
  }
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "baton-router: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

static int run_router(int argc, char** argv) {
  const std::vector<FlagSpec> specs = all_flags();
  auto flags = baton::parse_flags(specs, argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "baton-router: %s\n\n%s", std::string(flags.status().message()).c_str(),
                 baton::usage("baton-router", kSynopsis, specs).c_str());
    return 2;
  }
  if (flags->has("help")) {
    std::printf("%s", baton::usage("baton-router", kSynopsis, specs).c_str());
    return 0;
  }
  if (auto s = baton::init_logging(flags->get("log-level").value_or("info")); !s.ok()) return fail(s);
  auto options = options_from_flags(*flags);
  if (!options.ok()) return fail(options.status());
  auto http_options = http_from_flags(*flags);
  if (!http_options.ok()) return fail(http_options.status());
  if (*http_options) {
    (*http_options)->tls = options->tls;
    (*http_options)->public_dashboard = flags->has("public-dashboard");
    (*http_options)->max_request_bytes = options->limits.max_request_bytes;
    fit_open_files(**http_options);
  }
  std::chrono::milliseconds drain_timeout{30000};
  if (auto s = read_ms(*flags, "drain-timeout-ms", &drain_timeout); !s.ok()) return fail(s);
  // A client that hangs up mid-write must be an error of that write, not the end of the process.
  signal(SIGPIPE, SIG_IGN);

  // Signals are taken by sigwait below, never by a handler on some gRPC thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Before the node pool opens its channels: they are mutual TLS with --tls-ca.
  const auto installed_credentials = baton::security::install_cluster_credentials(options->tls);
  baton::router::RouterService router(std::move(*options));
  auto port = router.start();
  if (!port.ok()) return fail(port.status());
  if (!router.metrics_url().empty()) {
    std::printf("baton-router metrics on %s\n", router.metrics_url().c_str());
  }
  if (!router.internal_address().empty()) {
    // Before the "ready on" line, which `baton up` and scripts wait for as the last one.
    std::printf("baton-router internal on %s\n", router.internal_address().c_str());
  }
  std::unique_ptr<baton::router::http::HttpServer> http;
  if (*http_options) {
    // Completions in flight over HTTP: the running and queued ones, and a few being tokenized or
    // refused.
    const std::size_t calls = router.max_calls_in_flight();
    (*http_options)->max_in_flight = calls > 0 ? calls : std::size_t{1} << 16;
    http = std::make_unique<baton::router::http::HttpServer>(router, std::move(**http_options));
    if (auto h = http->start(); !h.ok()) return fail(h.status());
    // Before the "ready on" line, which `baton up` and scripts wait for as the last one.
    std::printf("baton-router http on %s\n", http->base_url().c_str());
  }
  // The same "ready on" line as the nodes print: `baton up` and scripts wait for it.
  std::printf("baton-router ready on %s\n", router.address().c_str());
  std::fflush(stdout);

  int signal = 0;
  sigwait(&signals, &signal);
  spdlog::info("router: {} received: draining (up to --drain-timeout-ms {} ms)", signal == SIGINT ? "SIGINT" : "SIGTERM",
               drain_timeout.count());
  (void)router.drain(baton::router::Clock::now() + drain_timeout);
  if (http) http->stop();
  router.shutdown(std::chrono::seconds(1));
  spdlog::info("router: stopped");
  return 0;
}

// Returns only once gRPC has shut down (proto/grpc_exit.h): every gRPC object is gone by now.
int main(int argc, char** argv) { return baton::exit_after_grpc_shutdown(run_router(argc, argv)); }
