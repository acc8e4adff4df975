// The router as a server: the public baton.v1.Baton service (Generate, Abort, GetModelInfo,
// Tokenize) with grpc.health.v1 and server reflection on the public port (TLS, API keys), and the
// baton.node.v1.Registry service nodes join through on an internal port of its own, which serves
// cluster members only (mutual TLS with the cluster CA) and takes a bounded number of nodes. Owns the tokenizer (none: token-id mode), the node pool, the
// running requests and the counters. Easy to start in-process:
//
//   RouterService router(options);
//   absl::StatusOr<int> port = router.start();   // binds host:port (port 0: one is picked)
//   ...
//   router.shutdown();
//
// Front ends (the gRPC Generate here, router/http/ for the OpenAI API) share one request path:
// admit_async() encodes the prompt and registers the request (waiting in the admission queue when
// there is no room), run() drives it through the nodes; neither holds a thread while it waits.
//
// Must not: load model weights or link the engine (CMake forbids it); keep request logic here
// (request_flow.h has it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/v1/api.pb.h"
#include "router/admission_limits.h"
#include "router/dns_discovery.h"
#include "router/node_pool.h"
#include "router/prompt.h"
#include "router/request_flow.h"
#include "router/request_limits.h"
#include "metrics/metrics_server.h"
#include "router/router_metrics.h"
#include "router/router_stats.h"
#include "router/running_requests.h"
#include "router/spec_history.h"
#include "router/recent_requests.h"
#include "security/api_keys.h"
#include "security/tls_config.h"

namespace grpc {
class Server;
class Service;
}

namespace baton {
class Tokenizer;
}

namespace baton::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                  // 0: pick a free port
  std::string model_dir;                         // tokenizer files only; "" or none there: token-id mode
  std::string served_model_name;                 // "" : model_dir's base name (else the decode node's)
  std::string chat_template;                     // --chat-template FILE|TEMPLATE; "": tokenizer_config.json's
  // Requests running at once; more wait in the queue or are RESOURCE_EXHAUSTED. 0: no limit;
  // unset: derived from the decode nodes (admission_limits.h).
  std::optional<std::size_t> max_running_requests;
  std::size_t max_running_requests_per_key = 256;  // per API key (with keys); 0: no limit
  // Waiting for room at once (running_requests.h); 0: none wait; unset: derived like the above.
  std::optional<std::size_t> max_queued_requests;
  std::chrono::milliseconds queue_timeout{30000};  // the longest one waits
  std::vector<std::string> prefill_addresses;    // HOST:PORT
  std::vector<std::string> decode_addresses;
  std::vector<DnsTarget> dns_targets;            // --prefill-dns / --decode-dns (dns_discovery.h)
  std::chrono::milliseconds dns_refresh{5000};
  AddressFamily dns_family = AddressFamily::kAny;
  Resolver dns_resolver;                         // empty: getaddrinfo
  std::chrono::milliseconds forget_unreachable{60000};  // registered / DNS nodes; 0: never
  std::chrono::milliseconds poll_interval{500};  // health + Info polling of each node
  std::chrono::milliseconds health_timeout{1000};  // each health Check's deadline (node_pool.h)
  FlowOptions flow;                              // node_timeout is also Info polls' deadline
  std::optional<int> metrics_port;               // serve /metrics on host:port (0: any free port)
  std::optional<int> internal_port;              // serve the Registry here (0: any free port); none: no registry
  std::string internal_host;                     // "" : host
  std::size_t max_registered_nodes = 256;        // more registrations are RESOURCE_EXHAUSTED
  security::TlsConfig tls;                       // the public port's TLS (--tls-cert/--tls-key); plain: --insecure
  security::ApiKeys api_keys;                    // --api-keys-file: the public API's keys (none: open)
  bool public_dashboard = false;                 // /metrics (and /dashboard) without a key
  bool expose_topology = false;                  // node addresses and paths in errors, usage, model info (topology.h)
  RequestLimits limits;                          // sizes a public request must keep (request_limits.h)
};

// A request that passed admission: its prompt encoded, its ids registered among the running
// requests, under its owner (the caller's key id), until this is destroyed.
class AdmittedRequest {
 public:
  AdmittedRequest(RunningRequests& running, std::string owner, RunningRequest registered, EncodedPrompt prompt,
                  std::uint64_t cache_salt, Clock::time_point received)
      : running_(running),
        owner_(std::move(owner)),
        registered_(std::move(registered)),
        prompt_(std::move(prompt)),
        cache_salt_(cache_salt),
        received_(received) {}
  ~AdmittedRequest() { leave_running(); }
  AdmittedRequest(const AdmittedRequest&) = delete;
  AdmittedRequest& operator=(const AdmittedRequest&) = delete;

  const std::string& id() const { return registered_.client_id; }  // what the client sees
  const std::string& node_id() const { return registered_.node_id; }  // what nodes and logs see
  const std::string& owner() const { return owner_; }
  const EncodedPrompt& prompt() const { return prompt_; }
  // The nodes' prefix-cache salt: the caller's key and the request's cache_salt (0: neither).
  std::uint64_t cache_salt() const { return cache_salt_; }
  RequestControl& control() { return *registered_.control; }
  Clock::time_point received() const { return received_; }
  // Frees its place among the running requests (once; the destructor does it otherwise). The end of
  // a run calls it before the client hears the end, so a client that saw its request end never
  // finds it still counted, and a waiter is admitted a little sooner.
  void leave_running() {
    if (!left_.exchange(true)) running_.remove(owner_, registered_.client_id);
  }

 private:
  std::atomic<bool> left_{false};
  RunningRequests& running_;
  const std::string owner_;
  const RunningRequest registered_;
  const EncodedPrompt prompt_;
  const std::uint64_t cache_salt_;
  const Clock::time_point received_;
};

class RouterService {
 public:
  explicit RouterService(RouterOptions options);
  ~RouterService();
  RouterService(const RouterService&) = delete;
  RouterService& operator=(const RouterService&) = delete;

  // Loads the tokenizer, polls the nodes once, then serves. Returns the bound port.
  absl::StatusOr<int> start();
  // Graceful stop, step one (SIGTERM): grpc.health.v1 says NOT_SERVING (the readiness probe and
  // load balancers take the router out) and new requests are refused with UNAVAILABLE, on gRPC and
  // HTTP alike; running ones go on. Then wait_idle() until they ended, then shutdown().
  void begin_drain();
  bool draining() const { return draining_.load(); }
  // False when requests still run at the deadline; those are then cancelled with a message that
  // says the router is stopping (they end within the abort timeout).
  bool drain(Clock::time_point deadline);
  // Stops accepting calls; calls still running after `grace` are cancelled (and their node calls
  // with them). Idempotent.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // Blocks until the server has shut down.
  void wait();

  // The public request path, asynchronous end to end (no thread waits for a request).
  // admit_async: `caller` is authenticate()'s answer. `done` gets the admitted request, or
  // INVALID_ARGUMENT for a bad prompt or request_id, ALREADY_EXISTS for an id the caller runs
  // already, RESOURCE_EXHAUSTED past max_running_requests (in all or for the caller's key) once the
  // queue is full or the request waited queue_timeout in it, UNAVAILABLE while draining, CANCELLED
  // after leave_queue(). It is called once: at once (on this thread) or, after a wait in the queue,
  // from the thread that made room. Returns the wait's ticket for leave_queue() (0: no wait).
  using AdmitDone = std::function<void(absl::StatusOr<std::unique_ptr<AdmittedRequest>>)>;
  std::uint64_t admit_async(const baton::v1::GenerateRequest& request, Clock::time_point received,
                            const security::KeyId& caller, AdmitDone done);
  // The client of a queued request went away: its admission ends CANCELLED (nothing once admitted).
  void leave_queue(std::uint64_t ticket) { running_.leave_queue(ticket); }
  // What the request flow checks before its first node call, checked now, for a front end that
  // picks its response status before it streams: a usable decode node (UNAVAILABLE, naming the
  // nodes) and the prompt within that node's limits (INVALID_ARGUMENT).
  absl::Status check_servable(const AdmittedRequest& request, const baton::v1::SamplingParams& sampling) const;
  // Starts an admitted request and returns at once; `done` gets its status once it ended (its last
  // message written, its node calls over). server: the gRPC call, or null (then cancel the
  // request's control when its client goes away). `request`, `message` and `sink` must outlive
  // `done`.
  void run(AdmittedRequest& request, const baton::v1::GenerateRequest& message, const grpc::ServerContextBase* server,
           ResponseSink& sink, std::function<void(grpc::Status)> done);
  // Who a caller of the public API is, from its Authorization header or `authorization` metadata
  // (`Bearer KEY`): the key's id, or "" when no keys are configured. UNAUTHENTICATED (naming
  // nothing secret) for a missing or unknown key.
  absl::StatusOr<security::KeyId> authenticate(std::string_view authorization) const;
  bool requires_api_key() const { return options_.api_keys.enabled(); }
  baton::v1::ModelInfo model_info() const;
  // The Tokenize RPC's encoding (text or chat through the template), for the HTTP /tokenize.
  absl::StatusOr<EncodedPrompt> tokenize(const baton::v1::TokenizeRequest& request) const {
    return encoder_->encode(request);
  }
  // The name clients give as "model": options' served_model_name, else the model directory's base
  // name, else the decode nodes' model name ("" while none is known).
  std::string served_model_name() const;
  bool has_usable_decode_node() const;
  // A usable decode node's max_model_len; 0 while none is known.
  std::int32_t decode_max_model_len() const;
  const RequestLimits& limits() const { return options_.limits; }
  // The admission limits in force now (the operator's, or derived from the decode nodes).
  RunningLimits admission_limits() const { return running_.limits(); }
  // The most calls the front ends have in flight at once (running, queued, and some being
  // tokenized or refused); 0: no bound (--max-running-requests 0).
  std::size_t max_calls_in_flight() const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null: token-id mode

  std::string address() const;  // host:port once started
  std::string internal_address() const;  // host:port of the registry, "" without one
  std::string metrics_url() const;  // http://host:port/metrics, "" without --metrics-port
  // What GET /metrics answers (with or without --metrics-port): the HTTP API serves it too.
  std::string metrics_text() const;
  const RouterStats& stats() const { return stats_; }
  // What the /dashboard page draws: requests that finished lately, and the decode nodes'
  // speculative counters sampled at every Info poll.
  const RecentRequests& recent_requests() const { return recent_; }
  const SpecHistory& spec_history() const { return spec_history_; }
  NodePool& nodes() { return *pool_; }
  std::size_t running_requests() const { return running_.size(); }

 private:
  class BatonImpl;     // public_service.cc
  class GenerateCall;  // public_service.cc
  class RegistryImpl;

  // baton.v1.Baton over this router (public_service.cc).
  std::unique_ptr<grpc::Service> make_public_service();
  absl::Status servable(const AdmittedRequest& request, const baton::v1::SamplingParams& sampling) const;
  // Limits the operator left unset follow the decode nodes: recomputed after every poll.
  void follow_nodes();

  const RouterOptions options_;
  RouterStats stats_;
  RunningRequests running_;
  RecentRequests recent_;
  SpecHistory spec_history_;
  std::unique_ptr<PromptEncoder> encoder_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<NodePool> pool_;
  std::unique_ptr<DnsDiscovery> dns_;
  std::unique_ptr<CallWatchdog> watchdog_;
  std::unique_ptr<RequestFlow> flow_;
  std::unique_ptr<grpc::Service> baton_;  // baton.v1.Baton
  std::unique_ptr<RegistryImpl> registry_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> internal_server_;  // the Registry (internal_port)
  int internal_port_ = 0;
  std::unique_ptr<metrics::MetricsServer> metrics_server_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::atomic<RouterMetrics*> live_metrics_{nullptr};  // set once metrics_ exists; read by request threads
  int port_ = 0;
  bool shut_down_ = false;
  std::atomic<bool> draining_{false};
  std::mutex derived_mu_;
  DerivedLimits derived_;  // the last derived limits (derived_mu_)
};

}  // namespace baton::router
