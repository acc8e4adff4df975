// Boost.Beast (Debian's libboost-dev, header-only) rather than a hand-written HTTP parser or
// cpp-httplib: httplib serves a connection per thread, so 64 idle or slow-header clients froze the
// router's whole API; Beast's parser is incremental and Asio multiplexes every connection on a few
#include "http/http_listener.h"

#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/strand.hpp"
#include "common/status.h"
#include "http/http_connection.h"
#include "http/listener_state.h"
#include "security/tls_server_context.h"
#include "spdlog/spdlog.h"

namespace baton::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using State = HttpListener::State;

void accept_next(const std::shared_ptr<State>& state);

void on_accept(const std::shared_ptr<State>& state, beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !state->acceptor || !state->acceptor->is_open()) return;
  if (ec) {
    // Out of descriptors, mostly: wait a little instead of spinning.
    beast::error_code ignored;
    spdlog::warn("HTTP on port {}: accept failed: {}; retrying in 100 ms", state->acceptor->local_endpoint(ignored).port(),
                 ec.message());
    state->accept_retry->expires_after(std::chrono::milliseconds(100));
    state->accept_retry->async_wait([state](beast::error_code e) {
      if (!e) accept_next(state);
    });
    return;
  }
  if (state->connections.load() >= state->options.max_connections) {
    turn_away(state, std::move(socket));
  } else {
    ++state->connections;
    serve_connection(state, std::move(socket));
  }
  accept_next(state);
}

void accept_next(const std::shared_ptr<State>& state) {
  state->acceptor->async_accept(net::make_strand(state->ioc), [state](beast::error_code ec, tcp::socket socket) {
    on_accept(state, ec, std::move(socket));
  });
}

}  // namespace

HttpListener::HttpListener(ListenerOptions options, Handler handler)
    : options_(std::move(options)), state_(std::make_shared<State>(options_, std::move(handler))) {}

HttpListener::~HttpListener() {
  stop();
  // Run what exchanges posted after the threads ended (each finds its connection closed), so that
  // nothing queued keeps a connection, and through it this state, alive.
  state_->ioc.restart();
  state_->ioc.poll();
}

absl::StatusOr<int> HttpListener::start() {
  State& s = *state_;
  if (s.acceptor) return absl::FailedPreconditionError("the HTTP listener is started already");
  if (options_.tls.public_tls()) {
    s.ssl.emplace(net::ssl::context::tls_server);
    BATON_RETURN_IF_ERROR(security::configure_server_context(*s.ssl->native_handle(), options_.tls,
                                                               options_.require_client_cert));
  }
  const auto cannot_listen = [&](const std::string& why) {
    return absl::UnavailableError(str_cat("cannot listen for HTTP on ", options_.host, ":", options_.port, " (", why, ")"));
  };
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options_.host, ec);
  if (ec) return cannot_listen("not an IP address");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
  const auto acceptor_strand = net::make_strand(s.ioc);  // accepts and stop()'s close, one at a time
  s.acceptor.emplace(acceptor_strand);
  s.accept_retry.emplace(acceptor_strand);
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(net::socket_base::reuse_address(true), ec);  // never SO_REUSEPORT
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (ec) {
    s.acceptor.reset();
    return cannot_listen("in use, or not an address of this host?");
  }
  s.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    s.acceptor.reset();
    return cannot_listen(ec.message());
  }
  const int port = s.acceptor->local_endpoint().port();
  accept_next(state_);
  auto work = std::make_shared<net::executor_work_guard<net::io_context::executor_type>>(s.ioc.get_executor());
  threads_work_ = work;
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
    threads_.emplace_back([state = state_] { state->ioc.run(); });
  }
  return port;
}

void HttpListener::stop() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (s.stopped || threads_.empty()) {
      s.stopped = true;
      return;
    }
    s.stopped = true;
  }
  net::post(s.acceptor->get_executor(), [state = state_] {
    beast::error_code ec;
    if (state->acceptor) state->acceptor->close(ec);
    if (state->accept_retry) state->accept_retry->cancel();
  });
  std::vector<std::shared_ptr<Closable>> open;
  {
    std::lock_guard lock(s.mu);
    for (auto& [id, weak] : s.open) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->close();
  open.clear();
  threads_work_.reset();
  // Every socket is closed; what is left to run finishes at once. Exchanges still held elsewhere
  // only post into a stopped context from now on.
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  s.ioc.stop();
}

std::size_t HttpListener::open_connections() const { return state_->connections.load(); }

}  // namespace baton::http
