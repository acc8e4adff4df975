// Graceful drain on SIGTERM with real processes, as Kubernetes stops a pod: a decode node that
// drains finishes the requests it runs (tokens identical to the local reference), reports
// NOT_SERVING, refuses new ones so that the router places them on the other decode node, and exits
// 0 long before its drain timeout; a drain timeout that runs out ends the process on time and the
// client with a clean error; the router drains its own running requests the same way.
#include <signal.h>

#include <condition_variable>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mutex>

#include "grpc/health/v1/health.grpc.pb.h"
#include "httplib.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using cli::ClusterProcess;

SamplingParams long_greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;  // every request runs its whole length
  return p;
}

// Streams requests on threads of their own and tells the test when each has its first token.
class StreamingRequests {
 public:
  StreamingRequests(v1::Baton::Stub& stub, std::vector<v1::GenerateRequest> requests)
      : out_(requests.size()) {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      threads_.emplace_back([this, &stub, i, r = requests[i]] { run(stub, i, r); });
    }
  }
  ~StreamingRequests() { join(); }

  // True once every request streamed at least one token (false at the deadline).
  bool wait_all_started(std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return started_ == out_.size(); });
  }
  std::vector<Completion>& join() {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    return out_;
  }

 private:
  void run(v1::Baton::Stub& stub, std::size_t i, const v1::GenerateRequest& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(180));
    Completion c;
    auto reader = stub.Generate(&ctx, request);
    v1::GenerateResponse m;
    bool counted = false;
    while (reader->Read(&m)) {
      ++c.messages;
      c.ids.insert(c.ids.end(), m.token_ids().begin(), m.token_ids().end());
      if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        c.finish_reason = m.finish_reason();
        c.error = m.error();
        c.usage = m.usage();
      }
      if (!counted && !c.ids.empty()) {
        counted = true;
        std::lock_guard lock(mu_);
        ++started_;
        cv_.notify_all();
      }
    }
    c.status = reader->Finish();
    if (!counted) {  // failed before a token: let wait_all_started see the end rather than hang
      std::lock_guard lock(mu_);
      ++started_;
      cv_.notify_all();
    }
    out_[i] = std::move(c);
  }

  std::vector<Completion> out_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t started_ = 0;
};

grpc::health::v1::HealthCheckResponse::ServingStatus health(const std::string& address, grpc::Status* status) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckResponse response;
  *status = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response);
  return response.status();
}

std::vector<v1::GenerateRequest> requests_for(const std::vector<std::string>& prompts, const SamplingParams& p) {
  std::vector<v1::GenerateRequest> out;
  for (const std::string& prompt : prompts) out.push_back(text_request(prompt, p));
  return out;
}

// Two decode nodes and a prefill node; decode node 0 drains while requests run on both.
TEST(ServingDrain, ADrainingDecodeNodeFinishesItsRequestsAndTheRouterPlacesNewOnesElsewhere) {
  cli::ClusterOptions o = cluster_options(std::nullopt, "ucx", "drain");
  o.num_decode = 2;
  o.threads_per_node = 1;
  o.decode_args = {"--drain-timeout-ms", "120000"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClusterProcess* draining = (*cluster)->nodes("decode")[0];
  ClusterProcess* staying = (*cluster)->nodes("decode")[1];
  auto stub = router_stub((*cluster)->router_address());

  const SamplingParams params = long_greedy(400);
  const std::vector<std::string> prompts = code_prompts();
  const std::vector<std::string> first(prompts.begin(), prompts.begin() + 6);
  const std::vector<std::string> later(prompts.begin() + 5, prompts.end());
  const std::vector<LocalResult> expected_first = run_local(std::nullopt, first, std::vector<SamplingParams>(first.size(), params));
  const std::vector<LocalResult> expected_later = run_local(std::nullopt, later, std::vector<SamplingParams>(later.size(), params));

  StreamingRequests running(*stub, requests_for(first, params));
  ASSERT_TRUE(running.wait_all_started(std::chrono::seconds(120)));
  ASSERT_EQ(::kill(draining->process->pid(), SIGTERM), 0);
  const auto signalled = Clock::now();
  auto line = draining->process->wait_for_line("draining: NOT_SERVING", std::chrono::seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(*line, ::testing::Not(HasSubstr(" 0 request(s) running")));  // it has some to finish
  grpc::Status check;
  const auto status = health(draining->address, &check);
  if (check.ok()) {  // else it has exited already
    EXPECT_EQ(status, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  }

  // Requests sent while the node drains: on the other node, whether the router has seen
  // NOT_SERVING yet or meets the node's refusal first.
  const std::vector<Completion> after = generate_all(*stub, requests_for(later, params));
  std::vector<Completion>& before = running.join();

  int on_draining = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    SCOPED_TRACE("request started before SIGTERM: " + first[i]);
    ASSERT_TRUE(before[i].status.ok()) << before[i].status.error_message();
    EXPECT_EQ(before[i].ids, expected_first[i].ids);
    on_draining += before[i].usage.decode_node() == draining->address;
  }
  EXPECT_GT(on_draining, 0) << "no request ran on the node that drained";
  for (std::size_t i = 0; i < after.size(); ++i) {
    SCOPED_TRACE("request sent after SIGTERM: " + later[i]);
    ASSERT_TRUE(after[i].status.ok()) << after[i].status.error_message();
    EXPECT_EQ(after[i].ids, expected_later[i].ids);
    EXPECT_EQ(after[i].usage.decode_node(), staying->address);
  }
  const std::optional<int> code = draining->process->wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "the drained decode node did not exit";
  EXPECT_EQ(*code, 0);
  EXPECT_LT(Clock::now() - signalled, std::chrono::seconds(60));  // its drain timeout is 120 s
  EXPECT_TRUE(draining->process->wait_for_line("drained in", std::chrono::seconds(1)).ok());
}

// A drain timeout shorter than the request: the node stops on time and the client gets an error
// that says why, instead of hanging.
TEST(ServingDrain, ADrainTimeoutThatRunsOutEndsTheRequestWithAClearError) {
  cli::ClusterOptions o = cluster_options(std::nullopt, "ucx", "drain-timeout");
  o.num_prefill = 0;
  o.threads_per_node = 1;
  o.decode_args = {"--drain-timeout-ms", "300"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClusterProcess* d = (*cluster)->nodes("decode")[0];
  auto stub = router_stub((*cluster)->router_address());

  StreamingRequests running(*stub, requests_for({code_prompts()[0]}, long_greedy(1800)));
  ASSERT_TRUE(running.wait_all_started(std::chrono::seconds(120)));
  ASSERT_EQ(::kill(d->process->pid(), SIGTERM), 0);
  const auto signalled = Clock::now();
  const std::optional<int> code = d->process->wait(std::chrono::seconds(10));
  ASSERT_TRUE(code.has_value()) << "the decode node did not exit within its drain timeout + 10 s";
  EXPECT_LT(Clock::now() - signalled, std::chrono::milliseconds(300 + 5000));
  EXPECT_TRUE(d->process->wait_for_line("ran out with 1 request(s) running", std::chrono::seconds(1)).ok());

  const std::vector<Completion>& out = running.join();
  EXPECT_LT(Clock::now() - signalled, std::chrono::seconds(15));  // the client did not hang
  ASSERT_FALSE(out[0].status.ok());
  EXPECT_EQ(out[0].status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(out[0].status.error_message(), HasSubstr("--drain-timeout-ms (300 ms) ran out"));
  EXPECT_THAT(out[0].status.error_message(), HasSubstr(d->address));
  EXPECT_LT(out[0].ids.size(), 1800u);
}

// A prefill node whose drain timeout runs out while it holds a request (its KV transfer never
// finishes: --testing-hold-kv-transfer): the Prefill call ends with UNAVAILABLE before any token
// reached the client, so the router serves the request with a local prefill on D, with the
// reference's tokens; P exits on time.
TEST(ServingDrain, APrefillNodeThatCancelsOnItsDrainTimeoutLeavesTheRequestToTheRetry) {
  cli::ClusterOptions o = cluster_options(std::nullopt, "ucx", "drain-prefill");
  o.threads_per_node = 1;
  o.prefill_binary = "baton-prefill-testing";
  o.prefill_args = {"--testing-hold-kv-transfer", "--drain-timeout-ms", "300"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClusterProcess* p = (*cluster)->nodes("prefill")[0];
  ClusterProcess* d = (*cluster)->nodes("decode")[0];
  auto stub = router_stub((*cluster)->router_address());
  const SamplingParams params = long_greedy(24);
  const std::vector<LocalResult> expected = run_local(std::nullopt, {code_prompts()[1]}, {params});

  StreamingRequests running(*stub, requests_for({code_prompts()[1]}, params));
  ASSERT_TRUE(p->process->wait_for_line("holding the KV transfer of", std::chrono::seconds(60)).ok());
  ASSERT_EQ(::kill(p->process->pid(), SIGTERM), 0);
  const auto signalled = Clock::now();
  const std::optional<int> code = p->process->wait(std::chrono::seconds(10));
  ASSERT_TRUE(code.has_value()) << "the prefill node did not exit within its drain timeout + 10 s";
  EXPECT_EQ(*code, 0);
  EXPECT_LT(Clock::now() - signalled, std::chrono::milliseconds(300 + 5000));
  EXPECT_TRUE(p->process->wait_for_line("ran out with 1 request(s) running", std::chrono::seconds(1)).ok());

  const std::vector<Completion>& out = running.join();
  ASSERT_TRUE(out[0].status.ok()) << out[0].status.error_message();
  EXPECT_EQ(out[0].ids, expected[0].ids);
  EXPECT_TRUE(out[0].usage.local_prefill());
  EXPECT_EQ(out[0].usage.decode_node(), d->address);
}

// The router on SIGTERM: NOT_SERVING (and HTTP /health 503), a new request refused on gRPC and
// HTTP, the running one finished, exit 0.
TEST(ServingDrain, TheRouterDrainsItsRunningRequests) {
  cli::ClusterOptions o = cluster_options(std::nullopt, "ucx", "drain-router");
  o.num_prefill = 0;
  o.threads_per_node = 1;
  o.router_args = {"--drain-timeout-ms", "120000"};
  o.http_port = 0;
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClusterProcess& router = (*cluster)->router();
  auto stub = router_stub(router.address);
  const SamplingParams params = long_greedy(800);
  const std::vector<LocalResult> expected = run_local(std::nullopt, {code_prompts()[3]}, {params});

  StreamingRequests running(*stub, requests_for({code_prompts()[3]}, params));
  ASSERT_TRUE(running.wait_all_started(std::chrono::seconds(120)));
  ASSERT_EQ(::kill(router.process->pid(), SIGTERM), 0);
  ASSERT_TRUE(router.process->wait_for_line("router: draining: NOT_SERVING, new requests refused, 1 running",
                                            std::chrono::seconds(30)).ok());
  // While the request runs (800 tokens) the router is still up: refusals, not closed ports.
  const Completion refused = generate(*stub, text_request(code_prompts()[0], long_greedy(4)), std::chrono::seconds(30));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("draining"));
  const std::string base = (*cluster)->router_http_url();  // http://HOST:PORT/v1
  httplib::Client http(base.substr(0, base.size() - 3));
  http.set_read_timeout(std::chrono::seconds(30));
  const auto health = http.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 503);
  EXPECT_THAT(health->body, HasSubstr("draining"));
  const auto completion = http.Post("/v1/completions", R"({"model":"target","prompt":"def f(","max_tokens":4})", "application/json");
  ASSERT_TRUE(completion) << httplib::to_string(completion.error());
  EXPECT_EQ(completion->status, 503);
  EXPECT_THAT(completion->body, HasSubstr("draining"));
  const std::vector<Completion>& out = running.join();
  ASSERT_TRUE(out[0].status.ok()) << out[0].status.error_message();
  EXPECT_EQ(out[0].ids, expected[0].ids);
  const std::optional<int> code = router.process->wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace baton::testing
