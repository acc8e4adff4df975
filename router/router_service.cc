#include "router/router_service.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"

#include "baton/v1/api.grpc.pb.h"
#include "baton/v1/node.grpc.pb.h"
#include "common/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "proto/status_convert.h"
#include "router/prompt.h"
#include "router/topology.h"
#include "security/grpc_credentials.h"
#include "spdlog/spdlog.h"
#include "tokenizer/chat_template_arg.h"
#include "tokenizer/tokenizer.h"

namespace baton::router {
namespace {

constexpr int kMaxShortCallThreads = 64;

using baton::v1::GenerateRequest;
using baton::v1::GenerateResponse;

// Takes node addresses out of what a client is sent (topology.h): errors, and usage's nodes.
class RedactingSink final : public ResponseSink {
 public:
  RedactingSink(ResponseSink& inner, const NodePool& pool) : inner_(inner), pool_(pool) {}
  void write(const GenerateResponse& response, std::function<void(bool)> sent) override {
    if (response.error().empty() && !response.has_usage()) return inner_.write(response, std::move(sent));
    GenerateResponse copy = response;
    if (!copy.error().empty()) copy.set_error(redact_addresses(copy.error(), pool_.addresses()));
    if (copy.has_usage()) {
      copy.mutable_usage()->clear_prefill_node();
      copy.mutable_usage()->clear_decode_node();
    }
    inner_.write(copy, std::move(sent));
  }

 private:
  ResponseSink& inner_;
  const NodePool& pool_;
};

// What a run writes through, kept until it ended: the router's own records (the live page,
// metrics) see the nodes; the client does not, unless --expose-topology.
struct RunSinks {
  RunSinks(ResponseSink& client, bool expose_topology, const NodePool& pool, RecentRequests& recent,
           RouterMetrics* metrics, Clock::time_point received)
      : redacted(client, pool),
        measured(expose_topology ? client : static_cast<ResponseSink&>(redacted), recent, pool, metrics, received) {}
  RedactingSink redacted;
  MeasuringSink measured;  // observes the request when it goes
};

std::string model_name_of(const std::string& dir) {
  std::filesystem::path p(dir);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

// ---- baton.node.v1.Registry -------------------------------------------------------------------

// A registered address: HOST:PORT with a port in [1, 65535] and a host of printable characters
// (it is dialled, logged and shown on the dashboard).
absl::Status check_registered_address(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  int port = 0;
  const bool ok = colon != std::string::npos && colon > 0 && address.size() <= 253 + 8 &&
                  absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 1 && port <= 65535 &&
                  std::all_of(address.begin(), address.begin() + static_cast<std::ptrdiff_t>(colon),
                              [](unsigned char c) { return c > ' ' && c < 127; });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError("address is not HOST:PORT (a printable host and a port in [1, 65535])");
}

class RouterService::RegistryImpl final : public baton::node::v1::Registry::Service {
 public:
  RegistryImpl(NodePool& pool, std::size_t max_nodes) : pool_(pool), max_nodes_(max_nodes) {}

  grpc::Status RegisterNode(grpc::ServerContext*, const baton::node::v1::RegisterNodeRequest* request,
                            baton::node::v1::RegisterNodeResponse*) override {
    const std::string& role = request->role();
    NodeKind kind;
    if (role == "prefill") kind = NodeKind::kPrefill;
    else if (role == "decode" || role == "both") kind = NodeKind::kDecode;
    else {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "role is not \"prefill\", \"decode\" or \"both\"");
    }
    if (absl::Status s = check_registered_address(request->address()); !s.ok()) return to_grpc_status(s);
    if (absl::Status s = pool_.add(kind, request->address(), NodeSource::kRegistration, max_nodes_); !s.ok()) {
      spdlog::warn("router: registration refused: {}", std::string(s.message()));
      return to_grpc_status(absl::ResourceExhaustedError("the router takes no more registered nodes (--max-registered-nodes)"));
    }
    spdlog::info("router: {} registered", node_label(kind, request->address()));
    pool_.poll_soon();
    return grpc::Status::OK;
  }

 private:
  NodePool& pool_;
  const std::size_t max_nodes_;
};

// ---- RouterService ----------------------------------------------------------------------------

RouterService::RouterService(RouterOptions options)
    : options_(std::move(options)),
      running_(effective_limits(options_.max_running_requests, options_.max_queued_requests,
                                options_.max_running_requests_per_key, options_.queue_timeout, derive_limits({}))) {
  derived_ = derive_limits({});
}

void RouterService::follow_nodes() {
  if (options_.max_running_requests && options_.max_queued_requests) return;
  const DerivedLimits derived = derive_limits(pool_->decode_capacities());
  std::lock_guard lock(derived_mu_);
  if (derived.max_running == derived_.max_running && derived.max_queued == derived_.max_queued) return;
  derived_ = derived;
  running_.set_limits(effective_limits(options_.max_running_requests, options_.max_queued_requests,
                                       options_.max_running_requests_per_key, options_.queue_timeout, derived));
  const RunningLimits now = running_.limits();
  spdlog::info("router: admission limits now {} running, {} queued (from {} decode batch slots{})", now.max_running,
               now.max_queued, derived.decode_slots,
               options_.max_running_requests || options_.max_queued_requests ? "; one set by flag" : "");
}

std::size_t RouterService::max_calls_in_flight() const {
  if (options_.max_running_requests == std::size_t{0}) return 0;
  const std::size_t running = options_.max_running_requests.value_or(kMaxDerivedRunning);
  const std::size_t queued = options_.max_queued_requests.value_or(kMaxDerivedQueued);
  return std::min<std::size_t>(running + queued + 64, 1 << 16);
}

RouterService::~RouterService() { shutdown(std::chrono::milliseconds(0)); }

absl::StatusOr<int> RouterService::start() {
  if (server_) return absl::FailedPreconditionError("the router is started already");
  if (!options_.model_dir.empty() && Tokenizer::has_tokenizer_files(options_.model_dir)) {
    BATON_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::load(options_.model_dir));
    if (!options_.chat_template.empty()) {
      BATON_ASSIGN_OR_RETURN(const std::string source, chat_template_from_arg(options_.chat_template));
      BATON_RETURN_IF_ERROR(tokenizer_->set_chat_template(source, "--chat-template"));
    }
    spdlog::info("router: tokenizer from {} (chat template: {})", options_.model_dir,
                 tokenizer_->has_chat_template() ? "yes" : "no");
  } else if (!options_.chat_template.empty()) {
    return absl::InvalidArgumentError(str_cat("--chat-template: ", options_.model_dir.empty() ? "no --model" : options_.model_dir,
                                              " has no tokenizer files to render chats with"));
  } else {
    spdlog::info("router: no tokenizer files{}{}: token-id mode (prompts and output as token ids)",
                 options_.model_dir.empty() ? "" : " in ", options_.model_dir);
  }
  NodePoolOptions pool_options;
  pool_options.prefill_addresses = options_.prefill_addresses;
  pool_options.decode_addresses = options_.decode_addresses;
  pool_options.poll_interval = options_.poll_interval;
  pool_options.node_timeout = options_.flow.node_timeout;
  pool_options.health_timeout = options_.health_timeout;
  pool_options.forget_unreachable_after = options_.forget_unreachable;
  pool_options.on_info = [this](const Node& node, const baton::node::v1::NodeInfo& info) {
    if (node.kind() == NodeKind::kDecode) spec_history_.record(node.address(), info, WallClock::now());
  };
  pool_options.on_polled = [this] { follow_nodes(); };
  pool_ = std::make_unique<NodePool>(std::move(pool_options));
  watchdog_ = std::make_unique<CallWatchdog>();
  flow_ = std::make_unique<RequestFlow>(*pool_, stats_, *watchdog_, options_.flow);
  encoder_ = std::make_unique<PromptEncoder>(tokenizer_.get());
  baton_ = make_public_service();
  registry_ = std::make_unique<RegistryImpl>(*pool_, options_.max_registered_nodes);
  if (!options_.dns_targets.empty()) {
    DnsDiscoveryOptions dns;
    dns.targets = options_.dns_targets;
    dns.refresh_interval = options_.dns_refresh;
    dns.family = options_.dns_family;
    if (options_.dns_resolver) dns.resolver = options_.dns_resolver;
    dns_ = std::make_unique<DnsDiscovery>(*pool_, std::move(dns));
    dns_->start(options_.flow.node_timeout);  // the first lookup, so that the first poll finds its nodes
  }
  pool_->start();  // one round first, so that the first requests find the nodes

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string listen = str_cat(options_.host, ":", options_.port);
  builder.AddListeningPort(listen, security::public_server_credentials(options_.tls), &port_);
  builder.RegisterService(baton_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.limits.max_request_bytes));
  // A second router on the same port must fail, not share it (gRPC sets SO_REUSEPORT by default).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  {
    // Generate runs on the callback API and holds no thread; the short calls (Abort, GetModelInfo,
    // Tokenize, health) are synchronous and spend one each while they run: bound those threads.
    // Calls past it are RESOURCE_EXHAUSTED before any handler runs.
    grpc::ResourceQuota quota("baton-router public");
    quota.SetMaxThreads(kMaxShortCallThreads);
    builder.SetResourceQuota(quota);
  }
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    if (dns_) dns_->stop();
    pool_->stop();
    return absl::UnavailableError(str_cat("cannot listen on ", listen, " (in use, or not an address of this host?)"));
  }
  if (options_.internal_port) {
    // Cluster members only: the nodes that register (the router's own polling goes out, not in).
    grpc::ServerBuilder internal;
    const std::string host = options_.internal_host.empty() ? options_.host : options_.internal_host;
    const std::string at = str_cat(host, ":", *options_.internal_port);
    internal.AddListeningPort(at, security::cluster_server_credentials(options_.tls), &internal_port_);
    internal.RegisterService(registry_.get());
    internal.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    internal.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 16);
    internal.SetMaxReceiveMessageSize(64 << 10);  // a registration is a few bytes
    internal_server_ = internal.BuildAndStart();
    if (!internal_server_ || internal_port_ == 0) {
      internal_server_.reset();
      server_->Shutdown();
      server_.reset();
      if (dns_) dns_->stop();
      pool_->stop();
      return absl::UnavailableError(
          str_cat("cannot listen on ", at, " (--internal-port: in use, or not an address of this host?)"));
    }
    spdlog::info("router: serving the node registry on {} ({}; at most {} registered nodes)", internal_address(),
                 options_.tls.cluster_tls() ? "cluster members only: mutual TLS" : "PLAIN TEXT (--insecure)",
                 options_.max_registered_nodes);
  }
  if (options_.metrics_port) {
    metrics::MetricsServerOptions metrics_options;
    metrics_options.tls = options_.tls;
    if (options_.api_keys.enabled() && !options_.public_dashboard) {
      metrics_options.authorize = [this](const std::string& authorization) { return authenticate(authorization).ok(); };
    }
    auto m = metrics::MetricsServer::start(options_.host, *options_.metrics_port, std::move(metrics_options));
    if (!m.ok()) {
      if (internal_server_) internal_server_->Shutdown();
      internal_server_.reset();
      server_->Shutdown();
      server_.reset();
      if (dns_) dns_->stop();
      pool_->stop();
      return m.status();
    }
    metrics_server_ = std::move(*m);
  } else {
    metrics_server_ = metrics::MetricsServer::unserved();  // the HTTP API's /metrics serves it
  }
  // The name clients send as "model" (the decode nodes' until the router has one of its own).
  metrics_server_->set_model_name([this] { return served_model_name(); });
  metrics_ = std::make_unique<RouterMetrics>(*metrics_server_, stats_, running_, address());
  live_metrics_.store(metrics_.get(), std::memory_order_release);
  // Ready: the tokenizer is loaded and the nodes were polled once.
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(baton::v1::Baton::service_full_name(), true);
  spdlog::info("router: serving baton.v1.Baton on {} ({}{})", address(),
               security::describe(options_.tls, security::TlsRole::kRouter),
               options_.api_keys.enabled() ? str_cat("; ", options_.api_keys.size(), " API key(s)") : "; no API keys");
  return port_;
}

std::string RouterService::metrics_url() const { return metrics_server_ ? metrics_server_->url() : ""; }

std::string RouterService::metrics_text() const { return metrics_server_ ? metrics_server_->text() : ""; }

void RouterService::begin_drain() {
  if (draining_.exchange(true)) return;
  running_.refuse_new("the router is draining (shutting down): send the request to another router");
  if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  spdlog::info("router: draining: NOT_SERVING, new requests refused, {} running", running_.size());
}

bool RouterService::drain(Clock::time_point deadline) {
  begin_drain();
  if (running_.wait_until_empty(deadline)) {
    spdlog::info("router: drained: no request is running");
    return true;
  }
  const std::size_t left = running_.cancel_all("the router is shutting down: its --drain-timeout-ms ran out");
  spdlog::warn("router: --drain-timeout-ms ran out with {} request(s) running; cancelled them", left);
  // Cancelled requests end within the abort timeout (their node calls are woken at once).
  (void)running_.wait_until_empty(Clock::now() + options_.flow.abort_timeout + std::chrono::seconds(1));
  return false;
}

void RouterService::shutdown(std::chrono::milliseconds grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (internal_server_) {
    internal_server_->Shutdown(std::chrono::system_clock::now() + grace);
    internal_server_->Wait();
  }
  if (server_) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_->Wait();
  }
  if (dns_) dns_->stop();
  if (pool_) pool_->stop();
}

void RouterService::wait() {
  if (server_) server_->Wait();
}

std::uint64_t RouterService::admit_async(const GenerateRequest& request, Clock::time_point received,
                                        const security::KeyId& caller, AdmitDone done) {
  stats_.enter(RequestState::kReceived);
  auto refuse = [&](const absl::Status& s) {
    stats_.enter(RequestState::kFailed);
    done(s);
    return std::uint64_t{0};
  };
  if (absl::Status s = check_request_id(request.request_id()); !s.ok()) return refuse(s);
  if (request.cache_salt().size() > 256) {
    return refuse(absl::InvalidArgumentError(str_cat("cache_salt: ", request.cache_salt().size(), " bytes; at most 256")));
  }
  // Before anything is spent on it (tokenizing above all).
  if (absl::Status s = check_request_limits(request, options_.limits, decode_max_model_len()); !s.ok()) return refuse(s);
  absl::StatusOr<EncodedPrompt> prompt = encoder_->encode(request);
  if (!prompt.ok()) return refuse(prompt.status());
  // Each key's requests share prefix-cache blocks only among themselves: cached_tokens tells one
  // key nothing about another's prompts.
  std::uint64_t salt = 0;
  if (!caller.empty() || !request.cache_salt().empty()) {
    const std::string digest = security::sha256_hex(str_cat(caller, std::string(1, '\0'), request.cache_salt()));
    salt = std::stoull(digest.substr(0, 16), nullptr, 16);
  }
  auto encoded = std::make_shared<EncodedPrompt>(std::move(*prompt));
  const std::uint64_t ticket = running_.add_async(
      caller, request.request_id(),
      [this, caller, encoded, salt, received, done = std::move(done)](absl::StatusOr<RunningRequest> registered) {
        if (!registered.ok()) {
          stats_.enter(RequestState::kFailed);
          return done(registered.status());
        }
        stats_.enter(RequestState::kAdmitted);
        done(std::make_unique<AdmittedRequest>(running_, caller, std::move(*registered), std::move(*encoded), salt,
                                               received));
      });
  if (ticket != 0) stats_.enter(RequestState::kQueued);
  return ticket;
}

absl::Status RouterService::check_servable(const AdmittedRequest& request,
                                           const baton::v1::SamplingParams& sampling) const {
  absl::Status s = servable(request, sampling);
  if (s.ok() || options_.expose_topology) return s;
  return absl::Status(s.code(), redact_addresses(std::string(s.message()), pool_->addresses()));
}

absl::Status RouterService::servable(const AdmittedRequest& request, const baton::v1::SamplingParams& sampling) const {
  std::string problems;
  for (const NodeStatus& n : pool_->status()) {
    if (n.kind != NodeKind::kDecode) continue;
    if (n.usable && n.info) {
      return check_prompt_limits(request.prompt().ids, sampling, n.info->vocab_size(), n.info->max_model_len(),
                                 node_label(n.kind, n.address));
    }
    problems += str_cat(problems.empty() ? "" : "; ", node_label(n.kind, n.address), ": ", n.problem);
  }
  return absl::UnavailableError(
      str_cat("no decode node is usable", problems.empty() ? " (none is configured)" : str_cat(" (", problems, ")")));
}

std::int32_t RouterService::decode_max_model_len() const {
  for (const NodeStatus& n : pool_->status()) {
    if (n.kind == NodeKind::kDecode && n.usable && n.info) return n.info->max_model_len();
  }
  return 0;
}

bool RouterService::has_usable_decode_node() const {
  for (const NodeStatus& n : pool_->status()) {
    if (n.kind == NodeKind::kDecode && n.usable) return true;
  }
  return false;
}

void RouterService::run(AdmittedRequest& request, const GenerateRequest& message, const grpc::ServerContextBase* server,
                        ResponseSink& sink, std::function<void(grpc::Status)> done) {
  stats_.requests.fetch_add(1, std::memory_order_relaxed);
  auto sinks = std::make_shared<RunSinks>(sink, options_.expose_topology, *pool_, recent_,
                                          live_metrics_.load(std::memory_order_acquire), request.received());
  flow_->start(message, request.id(), request.node_id(), request.cache_salt(), request.prompt().ids, request.control(),
               server, sinks->measured, request.received(),
               [this, &request, sinks, node_id = request.node_id(), done = std::move(done)](grpc::Status s) mutable {
                 sinks->measured.set_status(s);
                 sinks.reset();  // the request is observed before its client hears the end
                 request.leave_running();  // and no longer counted (its owner keeps it until the end)
                 if (!s.ok()) {
                   stats_.requests_failed.fetch_add(1, std::memory_order_relaxed);
                   spdlog::debug("router: request {} ended with {}: {}", node_id, grpc_code_name(s.error_code()),
                                 s.error_message());
                   if (!options_.expose_topology) {
                     s = grpc::Status(s.error_code(), redact_addresses(s.error_message(), pool_->addresses()));
                   }
                 }
                 done(s);
               });
}

baton::v1::ModelInfo RouterService::model_info() const {
  baton::v1::ModelInfo info;
  const baton::node::v1::NodeInfo* decode = nullptr;
  const std::vector<NodeStatus> nodes = pool_->status();
  for (const NodeStatus& n : nodes) {
    if (!n.usable) continue;
    if (n.kind == NodeKind::kPrefill) {
      info.set_num_prefill_nodes(info.num_prefill_nodes() + 1);
    } else {
      info.set_num_decode_nodes(info.num_decode_nodes() + 1);
      if (decode == nullptr) decode = &*n.info;
    }
  }
  const Tokenizer* tokenizer = tokenizer_.get();
  if (!options_.served_model_name.empty()) info.set_model(options_.served_model_name);
  else if (!options_.model_dir.empty()) info.set_model(model_name_of(options_.model_dir));
  else if (decode != nullptr) info.set_model(decode->model_name());
  if (decode != nullptr) {
    info.set_vocab_size(decode->vocab_size());
    info.set_max_model_len(decode->max_model_len());
    info.set_backend(decode->backend());
    info.set_speculative_config(options_.expose_topology ? decode->speculative_config()
                                                         : redact_speculative_config(decode->speculative_config()));
  } else if (tokenizer != nullptr) {
    info.set_vocab_size(tokenizer->vocab_size());
  }
  info.set_has_tokenizer(tokenizer != nullptr);
  info.set_has_chat_template(tokenizer != nullptr && tokenizer->has_chat_template());
  return info;
}

absl::StatusOr<security::KeyId> RouterService::authenticate(std::string_view authorization) const {
  if (!options_.api_keys.enabled()) return security::KeyId();
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing API key: send 'authorization: Bearer KEY' (the HTTP header or gRPC metadata)");
  }
  const std::optional<std::string> token = security::presented_key(authorization);
  std::optional<security::KeyId> id = token ? options_.api_keys.match(*token) : std::nullopt;
  if (!id) return absl::UnauthenticatedError("invalid API key");
  return *id;
}

std::string RouterService::served_model_name() const { return model_info().model(); }

std::string RouterService::address() const { return str_cat(options_.host, ":", port_); }

std::string RouterService::internal_address() const {
  if (!internal_server_) return "";
  return str_cat(options_.internal_host.empty() ? options_.host : options_.internal_host, ":", internal_port_);
}

}  // namespace baton::router
