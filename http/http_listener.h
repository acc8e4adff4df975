// Baton's event-driven HTTP/1.1 listener (Boost.Beast on Asio), under the router's OpenAI API
// (router/http/http_server.h) and every process's /metrics (metrics/metrics_server.h). A few I/O
// threads serve every connection; no thread waits on a client:
//  - connections: at most `max_connections` open at once; one more is answered 503 (plain text) or
//    closed (TLS) at once, without reading it, so the rest keep being served;
//  - deadlines: an idle keep-alive connection is closed after `idle_timeout`; once a request's first
//    byte arrives its header must be complete within `header_timeout` and its body within
//    `body_timeout` (slow-header clients are dropped, never served a thread); a write that makes no
//    progress for `write_timeout` ends the connection; a TLS handshake gets `header_timeout`;
//  - sizes: headers over 16 KiB get 431, bodies over `max_body_bytes` get 413 (checked against
//    Content-Length before any body byte is read), malformed HTTP gets 400; each then closes;
//  - hang-ups: while a handler owns an exchange, a ConnectionWatch polls the socket for the peer's
//    hang-up (POLLRDHUP) and calls the exchange's on_hangup, so a request is cancelled even while
//    nothing is written to its client.
// Handlers run on an I/O thread and must not block: they reply at once, or keep the Exchange and
// answer it later from any thread (it is thread-safe and outlives the connection), streaming with
// write_async() so that no thread waits on a slow client. Must not: know routes,
// OpenAI or API keys (its users do), or spawn threads for requests.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/string_body.hpp"
#include "security/tls_config.h"

namespace baton::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;

// A complete response.
struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// One request's way back to its client. Thread-safe; every method may be called from any thread.
// Either reply() once, or start_stream(), write()s and finish(). Dropping the last reference
// without answering closes the connection.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const Request& request() const = 0;
  virtual const std::string& peer() const = 0;  // "ADDRESS:PORT" of the client
  virtual void reply(Reply reply) = 0;
  // A 200 with chunked transfer encoding; the body follows in write()s.
  virtual void start_stream(std::string content_type, std::vector<std::pair<std::string, std::string>> headers) = 0;
  // Queues one chunk. Blocks (up to the write timeout) while more than 1 MiB is queued for a slow
  // client. False once the client is gone (hung up, write failed or timed out, or server stopping).
  virtual bool write(std::string data) = 0;
  // write() without blocking: queues the chunk (nothing once the client is gone) and calls `room`
  // once: true as soon as less than 1 MiB is queued (at once, on this thread, when that holds
  // already), false once the client is gone (a client that reads nothing is gone after the write
  // timeout). Write the next chunk only after `room`.
  virtual void write_async(std::string data, std::function<void(bool room)> room) = 0;
  virtual void finish() = 0;  // the last chunk
  // Called once, on some thread, if the client goes away before the exchange is answered and sent
  // (immediately if it is gone already). Must not block.
  virtual void on_hangup(std::function<void()> fn) = 0;
  virtual bool client_gone() const = 0;
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;

struct ListenerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free port
  security::TlsConfig tls;  // HTTPS with a certificate and key (public_tls()), plain text otherwise
  bool require_client_cert = false;  // with TLS: only clients showing a certificate of tls.ca_file
  std::size_t max_connections = 16384;
  std::size_t max_body_bytes = 16u << 20;
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds write_timeout{60'000};
  int io_threads = 2;
  // The body of the listener's own errors (400, 408, 413, 431, 503); plain text without it.
  std::function<Reply(int status, const std::string& message)> error_reply;
};

class HttpListener {
 public:
  HttpListener(ListenerOptions options, Handler handler);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds (SO_REUSEADDR, never SO_REUSEPORT: a port in use fails), starts the I/O threads and
  // returns the bound port.
  absl::StatusOr<int> start();
  // Stops accepting, closes every connection (their exchanges' clients become gone) and joins the
  // I/O threads. Exchanges held by handlers stay valid (they answer nothing). Idempotent. Release
  // every exchange before destroying the listener.
  void stop();

  std::size_t open_connections() const;
  bool tls() const { return options_.tls.public_tls(); }

  struct State;  // the I/O context and what every connection shares (http_listener.cc)

 private:
  const ListenerOptions options_;
  std::shared_ptr<State> state_;
  std::shared_ptr<void> threads_work_;  // keeps the I/O threads running until stop()
  std::vector<std::thread> threads_;
};

}  // namespace baton::http
