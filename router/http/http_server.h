// The OpenAI-compatible HTTP API of baton-router (cpp-httplib): GET /v1/models,
// POST /v1/completions, POST /v1/chat/completions (non-streamed, or server-sent events), GET /health
// (200 while a decode node is usable and the router is not draining, else 503) and GET /live (200 while the process runs).
// Requests take the router's own path (RouterService::admit / run), so they count against
// --max-running-requests and are abortable like gRPC ones; a client that closes its connection
// cancels its request on every node (connection_watch.h). With API keys configured (the router's
// --api-keys-file, the same keys as gRPC), every /v1 route needs `Authorization: Bearer KEY` (401
// otherwise) and so does the live page (/dashboard, dashboard.h) unless --public-dashboard;
// /health and /live stay open for probes. With --tls-cert and --tls-key it serves HTTPS only.
//
// Thread-safety: handlers run on httplib's thread pool, one request per thread. Must not: parse
// OpenAI bodies or build responses itself (openai_request.h, openai_response.h do).
#pragma once

#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "security/api_keys.h"
#include "security/tls_config.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace baton::router {
class RequestControl;
class RouterService;
}

namespace baton::router::http {

class ConnectionWatch;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;                       // 0: pick a free port
  int threads = 64;                   // concurrent requests (a stream holds its thread)
  security::TlsConfig tls;            // HTTPS with --tls-cert/--tls-key; plain text otherwise
  bool public_dashboard = false;      // /dashboard without an API key (--public-dashboard)
  std::size_t max_request_bytes = 16u << 20;  // larger bodies get 413 (--max-request-bytes)
};

class HttpServer {
 public:
  HttpServer(RouterService& router, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and serves on a thread of its own; returns the bound port.
  absl::StatusOr<int> start();
  // Cancels the requests it is running (they end with finish_reason "abort"), stops accepting and
  // waits for the server thread. Idempotent.
  void stop();
  std::string base_url() const;  // http(s)://HOST:PORT/v1

 private:
  // The caller's key id ("" without keys), or nullopt after answering 401. `browser`: the live
  // page, which a browser opens without headers: the 401 asks for a login (any user name, the
  // key as password).
  std::optional<security::KeyId> authorize(const httplib::Request& req, httplib::Response& res,
                                           bool browser = false) const;
  std::string scheme() const;  // "https" with TLS, else "http"
  void models(httplib::Response& res);
  void health(httplib::Response& res);
  void generate(int endpoint, const security::KeyId& caller, const httplib::Request& req, httplib::Response& res);

  RouterService& router_;
  const HttpOptions options_;
  std::unique_ptr<ConnectionWatch> watch_;
  std::mutex mu_;
  std::set<RequestControl*> running_;  // the controls of the requests being served
  bool stopping_ = false;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace baton::router::http
