// What an HttpListener's connections share (http_listener.cc, http_connection.cc): the I/O
// context, the TLS context, the acceptor, the hang-up watch, the count of open connections and
// the set a stop() closes. Internal to http/; users include http_listener.h. Must not: hold
// per-connection state.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "http/connection_watch.h"
#include "http/http_listener.h"

namespace baton::http {

// Something a stop must close.
class Closable {
 public:
  virtual ~Closable() = default;
  virtual void close() = 0;  // from any thread
};

struct HttpListener::State {
  State(const ListenerOptions& o, Handler h) : options(o), handler(std::move(h)) {}

  const ListenerOptions options;
  const Handler handler;
  boost::asio::io_context ioc;
  std::optional<boost::asio::ssl::context> ssl;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor;
  std::optional<boost::asio::steady_timer> accept_retry;
  ConnectionWatch watch;
  std::atomic<std::size_t> connections{0};
  std::mutex mu;
  std::map<std::uint64_t, std::weak_ptr<Closable>> open;  // for stop()
  std::uint64_t next_id = 1;
  bool stopped = false;

  // 0 once stopped.
  std::uint64_t add(std::weak_ptr<Closable> c) {
    std::lock_guard lock(mu);
    if (stopped) return 0;
    open.emplace(next_id, std::move(c));
    return next_id++;
  }
  void remove(std::uint64_t id) {
    std::lock_guard lock(mu);
    open.erase(id);
  }
};

}  // namespace baton::http
