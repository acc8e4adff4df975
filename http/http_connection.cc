#include "http/http_connection.h"

#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/bind_handler.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/string.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/chunk_encode.hpp"
#include "boost/beast/http/empty_body.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/serializer.hpp"
#include "boost/beast/http/write.hpp"
#include "boost/beast/ssl/ssl_stream.hpp"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

constexpr std::uint32_t kMaxHeaderBytes = 16u << 10;
constexpr std::size_t kMaxQueuedBytes = 1u << 20;  // a stream's chunks not yet written
constexpr auto kCloseTimeout = std::chrono::seconds(2);
constexpr std::size_t kLingerBytes = 1u << 20;  // dropped after our answer before closing

// A plain reply for the listener's own errors (the server's error_reply may dress it).
Reply plain_error(int status, const std::string& message) {
  Reply r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = message + "\n";
  return r;
}

bhttp::response<bhttp::string_body> to_response(Reply reply, unsigned version, bool keep_alive) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(reply.status), version};
  res.set(bhttp::field::content_type, reply.content_type);
  for (auto& [name, value] : reply.headers) res.set(name, value);
  res.body() = std::move(reply.body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

std::string peer_of(const tcp::socket& socket) {
  beast::error_code ec;
  const tcp::endpoint e = socket.remote_endpoint(ec);
  if (ec) return "?";
  return str_cat(e.address().to_string(), ":", e.port());
}


using State = HttpListener::State;

// One connection: reads requests one at a time, hands each to the handler as an Exchange, writes
// its answer, then reads the next (keep-alive) or closes. Every socket operation runs on the
// connection's strand.
template <class Stream>
class Session final : public Closable, public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(std::shared_ptr<State> state, Stream stream, std::string peer)
      : state_(std::move(state)), stream_(std::move(stream)), peer_(std::move(peer)) {}
  ~Session() override {
    state_->remove(id_);
    --state_->connections;
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->begin(); });
  }

  void close() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->shut("the listener stops"); });
  }

 private:
  void begin() {
    id_ = state_->add(this->weak_from_this());
    if (id_ == 0) return shut("the listener stops");
    if constexpr (kTls) {
      lowest().expires_after(state_->options.header_timeout);
      stream_.async_handshake(net::ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
        if (ec) {
          spdlog::debug("HTTPS handshake with {} failed: {}", self->peer_, ec.message());
          return self->shut("the TLS handshake failed");
        }
        self->read_request();
      });
    } else {
      read_request();
    }
  }

  // The handler's side of one request: thread-safe state, each answer posted to the strand.
  class Ex final : public Exchange, public std::enable_shared_from_this<Ex> {
   public:
    Ex(std::shared_ptr<Session> session, Request request)
        : session_(std::move(session)), request_(std::move(request)) {}

    Session& session() { return *session_; }
    const Request& request() const override { return request_; }
    const std::string& peer() const override { return session_->peer_; }

    void reply(Reply reply) override {
      if (!answer()) return;
      net::post(session_->stream_.get_executor(), [self = this->shared_from_this(), reply = std::move(reply)]() mutable {
        self->session_->send_reply(self, std::move(reply));
      });
    }

    void start_stream(std::string content_type, std::vector<std::pair<std::string, std::string>> headers) override {
      if (!answer()) return;
      net::post(session_->stream_.get_executor(), [self = this->shared_from_this(), content_type = std::move(content_type),
                                                   headers = std::move(headers)] {
        self->session_->send_head(self, content_type, headers);
      });
    }

    bool write(std::string data) override {
      {
        std::unique_lock lock(mu_);
        const auto deadline = std::chrono::steady_clock::now() + session_->state_->options.write_timeout;
        if (!cv_.wait_until(lock, deadline, [&] { return gone_ || done_ || queued_ < kMaxQueuedBytes; })) {
          lock.unlock();
          net::post(session_->stream_.get_executor(),
                    [self = this->shared_from_this()] { self->session_->shut("the client read nothing for the write timeout"); });
          return false;  // the client reads nothing
        }
        if (gone_ || done_) return false;
        queued_ += data.size();
      }
      net::post(session_->stream_.get_executor(), [self = this->shared_from_this(), data = std::move(data)]() mutable {
        self->session_->queue_chunk(self, std::move(data));
      });
      return true;
    }

    void write_async(std::string data, std::function<void(bool)> room) override {
      bool accepted = false, room_now = true;
      {
        std::lock_guard lock(mu_);
        if (!gone_ && !done_) {
          accepted = true;
          queued_ += data.size();
          if (queued_ >= kMaxQueuedBytes) {
            room_ = std::move(room);
            room_now = false;
          }
        }
      }
      if (accepted) {
        net::post(session_->stream_.get_executor(), [self = this->shared_from_this(), data = std::move(data)]() mutable {
          self->session_->queue_chunk(self, std::move(data));
        });
      }
      if (room_now) room(accepted);
    }

    void finish() override {
      net::post(session_->stream_.get_executor(),
                [self = this->shared_from_this()] { self->session_->finish_stream(self); });
    }

    void on_hangup(std::function<void()> fn) override {
      {
        std::lock_guard lock(mu_);
        if (!gone_) {
          hangup_ = std::move(fn);
          return;
        }
      }
      fn();
    }

    bool client_gone() const override {
      std::lock_guard lock(mu_);
      return gone_;
    }

    // From the strand:
    void sent(std::size_t bytes) {
      std::function<void(bool)> room;
      {
        std::lock_guard lock(mu_);
        queued_ -= std::min(queued_, bytes);
        if (room_ && queued_ < kMaxQueuedBytes) room = std::move(room_);
        cv_.notify_all();
      }
      if (room) room(true);
    }
    void done() {
      std::function<void(bool)> room;
      {
        std::lock_guard lock(mu_);
        done_ = true;
        hangup_ = nullptr;
        room = std::move(room_);
        cv_.notify_all();
      }
      if (room) room(false);
    }
    void gone() {
      std::function<void()> fn;
      std::function<void(bool)> room;
      {
        std::lock_guard lock(mu_);
        if (gone_ || done_) return;
        gone_ = true;
        fn = std::move(hangup_);
        room = std::move(room_);
        cv_.notify_all();
      }
      if (room) room(false);
      if (fn) fn();
    }

   private:
    bool answer() {
      std::lock_guard lock(mu_);
      if (answered_) return false;
      answered_ = true;
      return true;
    }

    const std::shared_ptr<Session> session_;
    const Request request_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool answered_ = false;
    bool gone_ = false;
    bool done_ = false;
    std::size_t queued_ = 0;
    std::function<void()> hangup_;
    std::function<void(bool)> room_;  // a write_async() waiting for the queue to drain
  };

  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  // Waits (idle_timeout) for the next request's first bytes, then parses it. Beast's parser takes a
  // header only once it is whole, so the header's own deadline starts with those first bytes.
  void read_request() {
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(state_->options.max_body_bytes);
    header_done_ = false;
    got_bytes_ = buffer_.size() > 0;
    if (got_bytes_) {
      lowest().expires_after(state_->options.header_timeout);
      return read_some();
    }
    lowest().expires_after(state_->options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
      if (self->closed_) return;
      if (ec) return self->shut("closed by the client, or idle too long");
      self->buffer_.commit(n);
      self->got_bytes_ = true;
      self->lowest().expires_after(self->state_->options.header_timeout);
      self->read_some();
    });
  }

  void read_some() {
    bhttp::async_read_some(stream_, buffer_, *parser_,
                           beast::bind_front_handler(&Session::on_read, this->shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (closed_) return;
    if (ec == bhttp::error::body_limit) {
      return fail_request(413, str_cat("the request body is larger than ", state_->options.max_body_bytes, " bytes"));
    }
    if (ec == bhttp::error::header_limit) {
      return fail_request(431, str_cat("the request header is larger than ", kMaxHeaderBytes, " bytes"));
    }
    if (ec && ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
        ec != bhttp::error::end_of_stream &&
        ec != bhttp::error::partial_message) {
      return fail_request(400, str_cat("malformed HTTP request: ", ec.message()));
    }
    if (ec) {
      if (ec == beast::error::timeout && got_bytes_) {
        spdlog::debug("HTTP client {} did not send its request in time; closed", peer_);
      }
      return shut("reading the request failed");
    }
    if (parser_->is_header_done() && !header_done_) {
      header_done_ = true;
      lowest().expires_after(state_->options.body_timeout);
      const auto& header = parser_->get();
      if (!parser_->is_done() && beast::iequals(header[bhttp::field::expect], "100-continue")) {
        return write_raw(std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n"), [this] { read_some(); });
      }
    }
    if (parser_->is_done()) return dispatch();
    read_some();
  }

  template <class Then>
  void write_raw(std::shared_ptr<std::string> bytes, Then then) {
    net::async_write(stream_, net::buffer(*bytes),
                     [self = this->shared_from_this(), bytes, then](beast::error_code ec, std::size_t) {
                       if (ec || self->closed_) return self->shut("a write failed");
                       then();
                     });
  }

  // A request the listener answers itself, then closes the connection.
  void fail_request(int status, const std::string& message) {
    keep_alive_ = false;
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        to_response(error_reply(status, message), 11, /*keep_alive=*/false));
    lowest().expires_after(state_->options.write_timeout);
    bhttp::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code, std::size_t) {
      self->graceful_close();
    });
  }

  Reply error_reply(int status, const std::string& message) const {
    return state_->options.error_reply ? state_->options.error_reply(status, message) : plain_error(status, message);
  }

  void dispatch() {
    lowest().expires_never();  // the handler may take as long as the request runs
    keep_alive_ = parser_->get().keep_alive();
    version_ = parser_->get().version();
    current_ = std::make_shared<Ex>(this->shared_from_this(), parser_->release());
    parser_.reset();
    std::weak_ptr<Ex> weak = current_;
    watched_ = state_->watch.watch(lowest().socket().native_handle(), [weak, exec = stream_.get_executor()] {
      // On the watch's thread: hand over to the strand (shut() must run there).
      if (auto ex = weak.lock()) net::post(exec, [ex] { ex->session().shut("the client hung up"); });
    });
    state_->handler(current_);
  }

  // --- the answer, on the strand ---

  void send_reply(const std::shared_ptr<Ex>& ex, Reply reply) {
    if (closed_ || ex != current_) return;
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(to_response(std::move(reply), version_, keep_alive_));
    lowest().expires_after(state_->options.write_timeout);
    bhttp::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
      if (ec) return self->shut("writing the reply failed");
      self->exchange_done();
    });
  }

  void send_head(const std::shared_ptr<Ex>& ex, const std::string& content_type,
                 const std::vector<std::pair<std::string, std::string>>& headers) {
    if (closed_ || ex != current_) return;
    head_.emplace(bhttp::status::ok, version_);
    head_->set(bhttp::field::content_type, content_type);
    for (const auto& [name, value] : headers) head_->set(name, value);
    head_->keep_alive(keep_alive_);
    head_->chunked(true);
    serializer_.emplace(*head_);
    writing_ = true;
    lowest().expires_after(state_->options.write_timeout);
    bhttp::async_write_header(stream_, *serializer_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec || self->closed_) return self->shut("writing the stream's header failed");
      self->head_sent_ = true;
      self->pump();
    });
  }

  void queue_chunk(const std::shared_ptr<Ex>& ex, std::string data) {
    if (closed_ || ex != current_) return;
    chunks_.push_back(std::move(data));
    pump();
  }

  void finish_stream(const std::shared_ptr<Ex>& ex) {
    if (closed_ || ex != current_) return;
    finishing_ = true;
    pump();
  }

  // Writes the next queued chunk, or the last chunk once finish() came and the queue is empty.
  void pump() {
    if (closed_ || writing_ || !head_sent_) return;
    if (!chunks_.empty()) {
      writing_ = true;
      lowest().expires_after(state_->options.write_timeout);
      net::async_write(stream_, bhttp::make_chunk(net::buffer(chunks_.front())),
                       [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                         self->writing_ = false;
                         // Closed meanwhile (shut() cleared the queue): this chunk is no more.
                         if (ec || self->closed_) return self->shut("writing a chunk failed");
                         const std::size_t n = self->chunks_.front().size();
                         self->chunks_.pop_front();
                         if (self->current_) self->current_->sent(n);
                         self->pump();
                       });
      return;
    }
    if (finishing_) {
      writing_ = true;
      net::async_write(stream_, bhttp::make_chunk_last(), [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
        self->writing_ = false;
        if (ec || self->closed_) return self->shut("writing the last chunk failed");
        self->exchange_done();
      });
    }
  }

  // The answer is out: the next request, or close.
  void exchange_done() {
    watched_.reset();
    if (current_) current_->done();
    current_.reset();
    head_.reset();
    serializer_.reset();
    chunks_.clear();
    head_sent_ = finishing_ = false;
    if (keep_alive_ && !closed_) return read_request();
    graceful_close();
  }

  void graceful_close() {
    if (closed_) return;
    if constexpr (kTls) {
      lowest().expires_after(kCloseTimeout);
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->shut("closed"); });
    } else {
      beast::error_code ec;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
      lowest().expires_after(kCloseTimeout);
      linger();
    }
  }

  // After our last byte: reads and drops what the client still sends (a body we refused, say),
  // up to kLingerBytes or kCloseTimeout, so that closing does not reset the connection before
  // the client read the answer.
  void linger() {
    lowest().async_read_some(net::buffer(discard_), [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
      self->lingered_ += n;
      if (ec || self->lingered_ > kLingerBytes) return self->shut("closed");
      self->linger();
    });
  }

 public:
  // Closes the connection; the exchange in hand, if any, learns its client is gone.
  void shut(const char* why) {
    if (closed_) return;
    closed_ = true;
    if (current_) spdlog::debug("HTTP connection of {} closed with its request in hand: {}", peer_, why);
    watched_.reset();  // before close(): the descriptor may be reused at once
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().close();
    chunks_.clear();
    if (current_) current_->gone();
    current_.reset();
  }

 private:
  std::shared_ptr<State> state_;
  Stream stream_;
  const std::string peer_;
  std::uint64_t id_ = 0;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool got_bytes_ = false;
  bool header_done_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  bool closed_ = false;
  std::shared_ptr<Ex> current_;
  std::unique_ptr<ConnectionWatch::Registration> watched_;
  std::optional<bhttp::response<bhttp::empty_body>> head_;
  std::optional<bhttp::response_serializer<bhttp::empty_body>> serializer_;
  std::deque<std::string> chunks_;
  bool writing_ = false;
  bool head_sent_ = false;
  bool finishing_ = false;
  std::array<char, 4096> discard_;
  std::size_t lingered_ = 0;
};

// Answers a connection over the limit with 503 (plain text only: a TLS one is just closed) without
// reading its request, then drops what it sends for up to a second (see Session::linger).
struct TurnedAway : std::enable_shared_from_this<TurnedAway> {
  explicit TurnedAway(tcp::socket socket) : stream(std::move(socket)) {}

  void answer(const Reply& reply) {
    res = to_response(reply, 11, /*keep_alive=*/false);
    res.set(bhttp::field::retry_after, "1");
    stream.expires_after(std::chrono::seconds(1));
    bhttp::async_write(stream, res, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return;
      beast::error_code e;
      self->stream.socket().shutdown(tcp::socket::shutdown_send, e);
      self->drain();
    });
  }
  void drain() {
    stream.async_read_some(net::buffer(discard), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (!ec) self->drain();
    });
  }

  beast::tcp_stream stream;
  bhttp::response<bhttp::string_body> res;
  std::array<char, 1024> discard;
};

}  // namespace

void turn_away(const std::shared_ptr<State>& state, tcp::socket socket) {
  if (state->options.tls.public_tls()) {
    beast::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
    return;
  }
  const std::string message = str_cat("the server has ", state->options.max_connections,
                                      " connections open, its limit; try again later");
  std::make_shared<TurnedAway>(std::move(socket))
      ->answer(state->options.error_reply ? state->options.error_reply(503, message) : plain_error(503, message));
}

void serve_connection(const std::shared_ptr<State>& state, tcp::socket socket) {
  std::string peer = peer_of(socket);
  if (state->ssl) {
    std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
        state, beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *state->ssl), std::move(peer))
        ->run();
  } else {
    std::make_shared<Session<beast::tcp_stream>>(state, beast::tcp_stream(std::move(socket)), std::move(peer))->run();
  }
}

}  // namespace baton::http
