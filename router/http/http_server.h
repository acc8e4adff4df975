// The OpenAI-compatible HTTP API of baton-router (cpp-httplib): GET /v1/models,
// POST /v1/completions, POST /v1/chat/completions (non-streamed, or server-sent events), GET /health
// (200 while a decode node is usable and the router is not draining, else 503) and GET /live (200 while the process runs).
// Requests take the router's own path (RouterService::admit / run), so they count against
// --max-running-requests and are abortable like gRPC ones; a client that closes its connection
// cancels its request on every node (connection_watch.h). With API keys configured, every /v1
// route needs `Authorization: Bearer KEY` (401 otherwise); /health, /live and the live page
// (/dashboard, dashboard.h) stay open.
//
// Thread-safety: handlers run on httplib's thread pool, one request per thread. Must not: parse
// OpenAI bodies or build responses itself (openai_request.h, openai_response.h do).
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

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
  std::vector<std::string> api_keys;  // empty: no authentication
  int threads = 64;                   // concurrent requests (a stream holds its thread)
};

// The keys in a file, one per line; blank lines and lines starting with '#' are skipped.
absl::StatusOr<std::vector<std::string>> read_api_keys_file(const std::string& path);

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
  std::string base_url() const;  // http://HOST:PORT/v1

 private:
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  void models(httplib::Response& res);
  void health(httplib::Response& res);
  void generate(int endpoint, const httplib::Request& req, httplib::Response& res);

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
