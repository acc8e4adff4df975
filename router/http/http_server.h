// The OpenAI-compatible HTTP API of baton-router: GET /v1/models, POST /v1/completions,
// POST /v1/chat/completions (non-streamed, or server-sent events), vLLM's POST /tokenize and
// /detokenize (with the same API keys as /v1), GET /metrics (the router's metrics, as on
// --metrics-port: a key unless --public-dashboard), GET /health (200 while a decode
// node is usable and the router is not draining, else 503) and GET /live (200 while the process
// runs), on the event-driven HttpListener (http_listener.h: connection limit, deadlines, sizes).
// Requests take the router's own path (RouterService::admit_async / run), so they count against
// --max-running-requests and are abortable like gRPC ones; a client that closes its connection
// cancels its request on every node. With API keys configured (the router's --api-keys-file, the
// same keys as gRPC), every /v1 route needs `Authorization: Bearer KEY` (401 otherwise) and so
// does the live page (/dashboard, dashboard.h) unless --public-dashboard; /health and /live stay
// open for probes and are answered on the I/O threads, so no slow client delays them. With
// --tls-cert and --tls-key it serves HTTPS only.
//
// Threads: none of its own. A completion is parsed and tokenized on the I/O thread that read it,
// then goes on from callbacks (admission, the run's messages, the client taking them:
// RouterService::admit_async / run, Exchange::write_async; http_completion.h, one request per
// choice), at most `max_in_flight` at once (more get 429). Must not: parse OpenAI bodies or build
// responses itself (openai_request.h, openai_response.h do), or block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "http/http_listener.h"
#include "router/http/tool_call_parser.h"
#include "security/api_keys.h"
#include "security/tls_config.h"

namespace baton::router {
class AdmittedRequest;
class RequestControl;
class RouterService;
}

namespace baton::router::http {

using baton::http::Exchange;
using baton::http::HttpListener;
using baton::http::Reply;

class HttpCompletion;
struct ApiError;

// A JSON 200, and an error in OpenAI's shape (429 and 503 with Retry-After).
Reply json_reply(std::string body);
Reply error_reply(const ApiError& e);

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;                       // 0: pick a free port
  security::TlsConfig tls;            // HTTPS with --tls-cert/--tls-key; plain text otherwise
  bool public_dashboard = false;      // /dashboard without an API key (--public-dashboard)
  std::size_t max_request_bytes = 16u << 20;  // larger bodies get 413 (--max-request-bytes)
  std::size_t max_connections = 16384;        // more get 503 (--max-http-connections)
  std::size_t max_in_flight = 1024 + 64;      // completions being served at once; more get 429
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive connections idle this long close
  std::chrono::milliseconds header_timeout{10'000}; // a request's header must arrive this fast
  // Tool calling (openai_tools.h): the format calls are read in (--tool-call-parser), and whether
  // tool_choice "auto" is served (--enable-auto-tool-choice, which needs the parser).
  std::optional<ToolCallFormat> tool_call_parser;
  bool enable_auto_tool_choice = false;
};

class HttpServer {
 public:
  HttpServer(RouterService& router, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and serves on the listener's I/O threads; returns the bound port.
  absl::StatusOr<int> start();
  // Cancels the requests it is running (they end with finish_reason "abort"), stops accepting,
  // closes every connection and waits for the completions' threads. Idempotent.
  void stop();
  std::string base_url() const;  // http(s)://HOST:PORT/v1

 private:
  void handle(std::shared_ptr<Exchange> ex);
  // The caller's key id ("" without keys), or nullopt after answering 401. `browser`: the live
  // page, which a browser opens without headers: the 401 asks for a login (any user name, the
  // key as password).
  std::optional<security::KeyId> authorize(Exchange& ex, bool browser = false) const;
  std::string scheme() const;  // "https" with TLS, else "http"
  Reply models() const;
  // vLLM's POST /tokenize and /detokenize (openai_request.h has their bodies), answered here.
  Reply tokenize(const std::string& body) const;
  Reply detokenize(const std::string& body) const;
  Reply health() const;
  friend class HttpCompletion;
  // Starts one completion (entered already); it is answered from callbacks (http_completion.h).
  void generate(int endpoint, const security::KeyId& caller, std::shared_ptr<Exchange> ex);
  bool enter();  // one more completion in flight; false: max_in_flight reached, or stopping
  void leave();
  // A running request's control, cancelled if the server stops; false (not tracked) once stopping.
  bool track(RequestControl* control);
  void untrack(RequestControl* control);

  RouterService& router_;
  const HttpOptions options_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::size_t in_flight_ = 0;           // completions not answered yet
  std::set<RequestControl*> running_;   // the controls of the requests being served
  bool stopping_ = false;
  std::unique_ptr<HttpListener> listener_;
  int port_ = 0;
};

}  // namespace baton::router::http
