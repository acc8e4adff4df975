// Cancels that come at once, with real processes (router, prefill and decode nodes on loopback,
// KV over UCX): 100 long requests over gRPC, each cancelled by its client 0–30 ms after it was
// sent (before its reservation, during its prefill, its KV transfer, its commit or its first
// tokens), and 100 streamed over HTTP whose clients hang up as quickly, leave nothing on the nodes
// — no request running or waiting, no KV block reserved or used — and a SIGTERM drain of the
// decode node afterwards finds nothing to wait for and ends at once.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Sends one streamed completion over plain HTTP/1.1 and returns the connected socket.
int send_http_completion(int port, const std::string& prompt, int max_tokens) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BATON_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "connect failed");
  const std::string body = nlohmann::json{{"model", "target"}, {"prompt", prompt}, {"max_tokens", max_tokens},
                                          {"temperature", 0}, {"ignore_eos", true}, {"stream", true}}
                               .dump();
  const std::string r = str_cat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
                                "Content-Length: ", body.size(), "\r\n\r\n", body);
  BATON_CHECK(::send(fd, r.data(), r.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(r.size()), "send failed");
  return fd;
}

TEST(ServingCancel, InstantCancelsLeaveNothingOnTheNodesAndADrainEndsAtOnce) {
  cli::ClusterOptions o = cluster_options(std::nullopt, "ucx", "instant-cancels");
  o.decode_args = {"--drain-timeout-ms", "60000"};
  o.http_port = 0;
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  cli::ClusterProcess* decode = (*cluster)->nodes("decode").front();
  cli::ClusterProcess* prefill = (*cluster)->nodes("prefill").front();

  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 3000;
  params.ignore_eos = true;  // a request nobody cancels runs for many seconds
  const std::vector<std::string> prompts = code_prompts();
  constexpr int kRequests = 100, kThreads = 10;
  std::atomic<int> cancelled{0}, finished{0};
  const std::string http = (*cluster)->router_http_url();
  const int http_port = std::stoi(http.substr(http.rfind(':') + 1));
  {
    // The HTTP requests below are well-formed: one like them, read to its end, streams tokens.
    const int fd = send_http_completion(http_port, prompts[0], 2);
    timeval tv{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string got;
    char buf[4096];
    for (ssize_t n; got.find("data: [DONE]") == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
      got.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    ASSERT_THAT(got, HasSubstr("HTTP/1.1 200"));
    ASSERT_THAT(got, HasSubstr("\"finish_reason\":\"length\""));
  }
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      for (int i = t; i < kRequests; i += kThreads) {
        const int fd = send_http_completion(http_port, prompts[i % prompts.size()], params.max_tokens);
        std::this_thread::sleep_for(std::chrono::microseconds(300 * i));  // the hang-up's moment
        ::close(fd);
      }
    });
  }
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      for (int i = t; i < kRequests; i += kThreads) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        auto reader = stub->Generate(&ctx, text_request(prompts[i % prompts.size()], params));
        // The cancel's moment is the scenario (0–30 ms after sending, spread over the requests),
        // not a wait for something to happen.
        std::this_thread::sleep_for(std::chrono::microseconds(300 * i));
        ctx.TryCancel();
        v1::GenerateResponse m;
        while (reader->Read(&m)) {
        }
        const grpc::Status s = reader->Finish();
        (s.error_code() == grpc::StatusCode::CANCELLED ? cancelled : finished)++;
      }
    });
  }
  for (std::thread& c : clients) c.join();
  EXPECT_EQ(cancelled.load(), kRequests) << finished.load() << " gRPC requests ended otherwise";

  // The nodes let go of every request: the router's aborts are sent when each call ends, so allow
  // them a moment to land, then nothing may be left.
  auto d = decode_stub(decode->address);
  auto p = prefill_stub(prefill->address);
  const auto settled = [&] {
    const node::v1::NodeInfo di = node_info(*d), pi = node_info(*p);
    bool idle = di.load().num_running() == 0 && di.load().num_waiting() == 0 && pi.load().num_running() == 0 &&
                pi.load().num_waiting() == 0;
    for (const auto& pool : di.load().pools()) idle = idle && pool.reserved() == 0 && pool.used() == 0;
    return idle;
  };
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!settled() && Clock::now() < deadline) std::this_thread::yield();
  EXPECT_TRUE(settled()) << "requests or KV blocks were left on the nodes";
  expect_no_kv_held(node_info(*d));

  // A drain finds nothing running and ends long before its 60 s timeout.
  ASSERT_EQ(::kill(decode->process->pid(), SIGTERM), 0);
  const auto signalled = Clock::now();
  auto line = decode->process->wait_for_line("draining: NOT_SERVING", std::chrono::seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(*line, HasSubstr(" 0 request(s) running"));
  const std::optional<int> code = decode->process->wait(std::chrono::seconds(50));
  ASSERT_TRUE(code.has_value()) << "the decode node's drain waited for requests nobody runs";
  EXPECT_EQ(*code, 0);
  EXPECT_LT(Clock::now() - signalled, std::chrono::seconds(20));
}

}  // namespace
}  // namespace baton::testing
