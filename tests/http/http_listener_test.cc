// The event-driven HTTP listener (http/http_listener.h) of the router's API and /metrics, on real loopback sockets,
// with handlers of the test's own: idle and slow-header connections hold no thread (a new request
// is served while hundreds are open), a header that does not arrive within its deadline and an idle
// keep-alive connection are closed, connections over the limit get 503 at once, oversized and
// malformed requests get 413/400 before their body is read, a hang-up reaches the exchange's
// owner, streamed chunks arrive in order on a connection that then serves its next request, and
// HTTPS serves its certificate and refuses plain text.
#include "http/http_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/security/security_test_support.h"

namespace baton::http {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A raw client socket on loopback, for what HTTP client libraries will not send.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // What arrives until the server closes the connection or `deadline` passes; `closed` says which.
  std::string read_until_closed(std::chrono::milliseconds deadline, bool* closed) {
    std::string got;
    *closed = false;
    const auto end = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return got;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        *closed = true;
        return got;
      }
      got.append(buf, static_cast<std::size_t>(n));
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

// Waits (up to 10 s) until `done` holds; polling a counter of the server, not a sleep standing in
// for an event.
template <class F>
bool eventually(F done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::yield();
  }
  return done();
}

Reply text(std::string body) {
  Reply r;
  r.content_type = "text/plain";
  r.body = std::move(body);
  return r;
}

// Answers every request with its method and target.
Handler echo() {
  return [](std::shared_ptr<Exchange> ex) {
    ex->reply(text(std::string(ex->request().method_string()) + " " + std::string(ex->request().target())));
  };
}

std::unique_ptr<HttpListener> start(ListenerOptions options, Handler handler, int* port) {
  auto l = std::make_unique<HttpListener>(std::move(options), std::move(handler));
  auto p = l->start();
  EXPECT_TRUE(p.ok()) << p.status();
  *port = p.ok() ? *p : 0;
  return l;
}

TEST(HttpListener, IdleAndSlowHeaderConnectionsHoldNoThread) {
  int port = 0;
  auto listener = start(ListenerOptions{}, echo(), &port);
  // More than any thread pool of ours: 300 idle connections and 100 that began a header and stopped.
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 400; ++i) {
    held.push_back(std::make_unique<RawClient>(port));
    ASSERT_TRUE(held.back()->connected());
    if (i % 4 == 0) {
      ASSERT_TRUE(held.back()->send("GET /slow HTTP/1.1\r\nHost: x\r\n"));
    }
  }
  ASSERT_TRUE(eventually([&] { return listener->open_connections() == 400; }));
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5);
  auto res = client.Get("/fresh?x=1");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "GET /fresh?x=1");
}

TEST(HttpListener, AHeaderThatDoesNotArriveInTimeAndAnIdleConnectionAreClosed) {
  ListenerOptions o;
  o.header_timeout = std::chrono::milliseconds(300);
  o.idle_timeout = std::chrono::milliseconds(600);
  int port = 0;
  auto listener = start(o, echo(), &port);
  RawClient slow(port), idle(port);
  ASSERT_TRUE(slow.send("GET / HTTP/1.1\r\nHost: x\r\n"));  // never finished
  bool closed = false;
  EXPECT_EQ(slow.read_until_closed(std::chrono::seconds(10), &closed), "");
  EXPECT_TRUE(closed) << "a header over its deadline must end the connection";
  EXPECT_EQ(idle.read_until_closed(std::chrono::seconds(10), &closed), "");
  EXPECT_TRUE(closed) << "an idle connection must end at the idle timeout";
  EXPECT_TRUE(eventually([&] { return listener->open_connections() == 0; }));
}

TEST(HttpListener, ConnectionsOverTheLimitGet503AndTheOthersAreServed) {
  ListenerOptions o;
  o.max_connections = 4;
  o.error_reply = [](int status, const std::string& message) {
    Reply r = text("error: " + message);
    r.status = status;
    return r;
  };
  int port = 0;
  auto listener = start(o, echo(), &port);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<RawClient>(port));
  ASSERT_TRUE(eventually([&] { return listener->open_connections() == 4; }));
  RawClient over(port);
  bool closed = false;
  const std::string answer = over.read_until_closed(std::chrono::seconds(10), &closed);
  EXPECT_TRUE(closed);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 503"));
  EXPECT_THAT(answer, HasSubstr("Retry-After: 1"));
  EXPECT_THAT(answer, HasSubstr("error: the server has 4 connections open, its limit"));
  // A held connection is still served, and one closed makes room for a new one.
  ASSERT_TRUE(held[0]->send("GET /held HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_THAT(held[0]->read_until_closed(std::chrono::seconds(10), &closed), HasSubstr("GET /held"));
  ASSERT_TRUE(eventually([&] { return listener->open_connections() == 3; }));
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/after");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
}

TEST(HttpListener, OversizedAndMalformedRequestsAreRefusedBeforeTheirBody) {
  ListenerOptions o;
  o.max_body_bytes = 1024;
  int handled = 0;
  std::mutex mu;
  int port = 0;
  auto listener = start(o, [&](std::shared_ptr<Exchange> ex) {
    std::lock_guard lock(mu);
    ++handled;
    ex->reply(text("ok"));
  }, &port);
  bool closed = false;
  {
    // Announced larger than the limit, waiting for 100-continue: refused without sending a byte.
    RawClient c(port);
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n"
                       "Expect: 100-continue\r\n\r\n"));
    const std::string answer = c.read_until_closed(std::chrono::seconds(10), &closed);
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 413"));
    EXPECT_THAT(answer, HasSubstr("larger than 1024 bytes"));
    EXPECT_TRUE(closed);
  }
  {
    // Chunked, with no length up front: refused once the body passes the limit.
    RawClient c(port);
    ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" +
                       std::string(0x800, 'a') + "\r\n"));
    EXPECT_THAT(c.read_until_closed(std::chrono::seconds(10), &closed), StartsWith("HTTP/1.1 413"));
  }
  {
    RawClient c(port);
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(20000, 'h') + "\r\n\r\n"));
    EXPECT_THAT(c.read_until_closed(std::chrono::seconds(10), &closed), StartsWith("HTTP/1.1 431"));
  }
  {
    RawClient c(port);
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost x\r\n\r\n"));
    EXPECT_THAT(c.read_until_closed(std::chrono::seconds(10), &closed), StartsWith("HTTP/1.1 400"));
  }
  {
    // A body within the limit, after 100-continue.
    RawClient c(port);
    ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n"
                       "Connection: close\r\n\r\n"));
    ASSERT_TRUE(c.send("hello"));
    const std::string answer = c.read_until_closed(std::chrono::seconds(10), &closed);
    EXPECT_THAT(answer, HasSubstr("HTTP/1.1 100 Continue"));
    EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200"));
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(handled, 1) << "only the well-formed request reaches the handler";
}

TEST(HttpListener, AHangUpReachesTheExchangeItsHandlerHolds) {
  std::promise<void> hung_up;
  std::shared_ptr<Exchange> held;
  std::mutex mu;
  int port = 0;
  auto listener = start(ListenerOptions{}, [&](std::shared_ptr<Exchange> ex) {
    ex->on_hangup([&] { hung_up.set_value(); });
    std::lock_guard lock(mu);
    held = std::move(ex);  // never answered
  }, &port);
  RawClient c(port);
  ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return held != nullptr;
  }));
  c.close();
  ASSERT_EQ(hung_up.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::lock_guard lock(mu);
  EXPECT_TRUE(held->client_gone());
  EXPECT_FALSE(held->write("late")) << "writing to a client that is gone must say so";
  held.reset();
}

TEST(HttpListener, StreamsChunksInOrderThenServesTheNextRequestOnTheConnection) {
  std::vector<std::thread> writers;
  std::mutex mu;
  int port = 0;
  auto listener = start(ListenerOptions{}, [&](std::shared_ptr<Exchange> ex) {
    if (ex->request().target() != "/stream") return ex->reply(text("plain"));
    std::lock_guard lock(mu);
    writers.emplace_back([ex] {
      ex->start_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
      for (int i = 0; i < 50; ++i) ASSERT_TRUE(ex->write("data: " + std::to_string(i) + "\n\n"));
      ex->finish();
    });
  }, &port);
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  auto streamed = client.Get("/stream");
  ASSERT_TRUE(streamed) << httplib::to_string(streamed.error());
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  std::string expected;
  for (int i = 0; i < 50; ++i) expected += "data: " + std::to_string(i) + "\n\n";
  EXPECT_EQ(streamed->body, expected);
  auto next = client.Get("/next");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->body, "plain");
  EXPECT_EQ(listener->open_connections(), 1u) << "both requests must have used one keep-alive connection";
  std::lock_guard lock(mu);
  for (auto& t : writers) t.join();
}

// A stream written with write_async, chunk after chunk from its own callbacks (no thread of its
// own): `room` waits while a client reads nothing (its chunks pile up past 1 MiB), then the client
// reads the whole stream in order; a second client that hangs up while its writer waits for room
// is told so (room false).
TEST(HttpListener, AsyncWritesWaitForRoomAndLearnOfAHangUp) {
  constexpr int kChunks = 1024;  // 64 KiB each: far more than the socket buffers hold
  struct Writer {
    std::shared_ptr<Exchange> ex;
    std::atomic<int> deferred{0};   // `room` calls that came after write_async returned
    std::atomic<bool> told_gone{false};
    void pump(int i) {
      if (i == kChunks) return ex->finish();
      std::string chunk = std::to_string(i) + ":" + std::string(64 << 10, 'x') + "\n";
      auto inline_call = std::make_shared<std::atomic<bool>>(true);
      ex->write_async(std::move(chunk), [this, i, inline_call](bool room) {
        if (!inline_call->load()) ++deferred;
        if (!room) {
          told_gone = true;
          return;
        }
        pump(i + 1);
      });
      inline_call->store(false);
    }
  };
  std::mutex mu;
  std::vector<std::shared_ptr<Writer>> writers;
  int port = 0;
  auto listener = start(ListenerOptions{}, [&](std::shared_ptr<Exchange> ex) {
    auto w = std::make_shared<Writer>();
    w->ex = std::move(ex);
    {
      std::lock_guard lock(mu);
      writers.push_back(w);
    }
    w->ex->start_stream("text/plain", {});
    w->pump(0);
  }, &port);
  auto writer = [&](std::size_t n) {
    std::lock_guard lock(mu);
    return writers.size() > n ? writers[n] : nullptr;
  };

  RawClient reader(port);
  ASSERT_TRUE(reader.send("GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return writer(0) && writer(0)->deferred > 0; }))
      << "a client that reads nothing must make the writer wait for room";
  bool closed = false;
  const std::string got = reader.read_until_closed(std::chrono::seconds(60), &closed);
  EXPECT_TRUE(closed);
  std::size_t at = 0;
  for (int i = 0; i < kChunks; ++i) {
    const std::string head = std::to_string(i) + ":";
    at = got.find(head, at);
    ASSERT_NE(at, std::string::npos) << "chunk " << i << " is missing or out of order";
    at += head.size();
  }
  EXPECT_FALSE(writer(0)->told_gone);

  RawClient leaver(port);
  ASSERT_TRUE(leaver.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return writer(1) && writer(1)->deferred > 0; }));
  leaver.close();
  EXPECT_TRUE(eventually([&] { return writer(1)->told_gone.load(); })) << "a hang-up must end the wait for room";
  std::lock_guard lock(mu);
  for (auto& w : writers) w->ex.reset();
}

// Clients that read part of a stream and hang up while chunks are being written: a chunk whose
// write completed just before the hang-up closed the connection must not be taken off a queue the
// close emptied (that corrupted the heap under a crowd of streaming clients). Every writer learns
// its client is gone, and the listener goes on serving.
TEST(HttpListener, ClientsThatHangUpMidStreamLeaveTheListenerWhole) {
  constexpr int kClients = 300;
  std::vector<std::thread> writers;
  std::mutex mu;
  std::atomic<int> told_gone{0};
  struct JoinAll {
    std::vector<std::thread>& threads;
    std::mutex& mu;
    ~JoinAll() {
      std::lock_guard lock(mu);
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  };
  int port = 0;
  auto listener = start(ListenerOptions{}, [&](std::shared_ptr<Exchange> ex) {
    if (ex->request().target() != "/stream") return ex->reply(text("plain"));
    std::lock_guard lock(mu);
    writers.emplace_back([ex, &told_gone] {
      ex->start_stream("text/event-stream", {});
      for (int i = 0; i < 100000; ++i) {
        if (!ex->write("data: " + std::string(64, 'x') + "\n\n")) {
          ++told_gone;
          return;
        }
      }
      ex->finish();
    });
  }, &port);
  JoinAll join_all{writers, mu};  // declared after the listener: joined before it stops
  for (int i = 0; i < kClients; ++i) {
    RawClient c(port);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
    // Read until the stream is flowing (its writer runs), a little more on some, then hang up.
    std::string got;
    bool closed = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.find("data: ") == std::string::npos && !closed && std::chrono::steady_clock::now() < deadline) {
      got += c.read_until_closed(std::chrono::milliseconds(5), &closed);
    }
    if (i % 3 == 0) got += c.read_until_closed(std::chrono::milliseconds(2), &closed);
    ASSERT_FALSE(closed) << "the server closed stream " << i << " by itself";
    ASSERT_NE(got.find("data: "), std::string::npos) << "stream " << i << " never started";
    c.close();  // mid-stream
  }
  {
    std::lock_guard lock(mu);
    for (auto& t : writers) t.join();
  }
  EXPECT_EQ(told_gone.load(), kClients) << "every writer must learn that its client hung up";
  httplib::Client client("127.0.0.1", port);
  auto after = client.Get("/after");
  ASSERT_TRUE(after) << httplib::to_string(after.error());
  EXPECT_EQ(after->body, "plain");
}

TEST(HttpListener, HttpsServesItsCertificateAndRefusesPlainText) {
  const auto dir = testing::scratch_path("http-listener-tls");
  testing::TestCa ca(dir, "listener CA");
  ca.issue("router");
  ListenerOptions o;
  o.tls = ca.config("router");
  int port = 0;
  auto listener = start(o, echo(), &port);
  httplib::SSLClient tls("127.0.0.1", port);
  tls.set_ca_cert_path(ca.ca_file().c_str());
  tls.enable_server_certificate_verification(true);
  auto res = tls.Get("/over-tls");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->body, "GET /over-tls");
  httplib::Client plain("127.0.0.1", port);
  plain.set_read_timeout(5);
  auto refused = plain.Get("/plain");
  EXPECT_FALSE(refused && refused->status == 200) << "plain text on the TLS port must not be served";
}

}  // namespace
}  // namespace baton::http
