// Every bound on a public request (router/request_limits.h), on a real local cluster of processes
// with API keys and the OpenAI API: over a limit, gRPC says INVALID_ARGUMENT or RESOURCE_EXHAUSTED
// naming the field and HTTP answers 413, 400 or 429 with an OpenAI error object naming it — all
// while a long, well-formed request streams on beside them and ends as it should. HTTP connections:
// slow-header clients are cut at their deadline and delay nobody; past --max-http-connections a
// connection gets 503.
#include <chrono>
#include <thread>

#include "baton/v1/api.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/http/http_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

constexpr const char* kKey = "limits-test-key";

class Limits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cli::ClusterOptions o;
    o.model_dir = source_path("models/baton-tiny-code/target");
    o.bin_dir = BATON_BINARY_DIR;
    o.log_dir = scratch_path("baton-limits").string();
    o.node_args = {"--kv-cache-memory", "0.125"};
    o.http_port = 0;
    std::filesystem::create_directories(o.log_dir);
    o.api_keys_file = o.log_dir + "/api-keys";
    std::ofstream(o.api_keys_file) << kKey << "\nsecond-key\n";
    o.router_args = {"--max-request-bytes", "65536", "--max-prompt-bytes", "20000",
                     "--max-running-requests-per-key", "2", "--max-queued-requests", "0", "--max-stop-strings", "8",
                     "--max-stop-string-bytes",
                     "64", "--max-http-connections", "40", "--http-header-timeout-ms", "3000"};
    auto c = cli::LocalCluster::start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static std::unique_ptr<v1::Baton::Stub> stub() {
    return v1::Baton::NewStub(grpc::CreateChannel(cluster_->router_address(), grpc::InsecureChannelCredentials()));
  }
  static std::string url(const std::string& path) { return cluster_->router_http_url() + path; }
  static std::string model() {
    return json::parse(curl(url("/models"), "", kKey, false).body)["data"][0]["id"].get<std::string>();
  }

  static inline cli::LocalCluster* cluster_ = nullptr;
};

struct Call {
  grpc::Status status;
  int messages = 0;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

Call generate(v1::Baton::Stub& stub, const v1::GenerateRequest& r, const std::string& key = kKey) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  ctx.AddMetadata("authorization", "Bearer " + key);
  Call out;
  auto reader = stub.Generate(&ctx, r);
  for (v1::GenerateResponse m; reader->Read(&m);) {
    ++out.messages;
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out.finish = m.finish_reason();
  }
  out.status = reader->Finish();
  return out;
}

v1::GenerateRequest request(const std::string& text, int max_tokens = 4) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

void expect_openai_error(const HttpResult& r, int status, const std::string& param) {
  EXPECT_EQ(r.status, status) << r.body;
  const json b = r.json_body();
  ASSERT_TRUE(b.is_object() && b.contains("error")) << r.body;
  EXPECT_FALSE(b["error"]["message"].get<std::string>().empty());
  if (param.empty()) {
    EXPECT_TRUE(b["error"]["param"].is_null()) << r.body;
  } else {
    EXPECT_EQ(b["error"]["param"], param) << r.body;
  }
}

TEST_F(Limits, OverEachLimitTheFieldIsNamedAndAWellFormedRequestRunsOn) {
  // The well-formed neighbour: long enough to span every refusal below.
  v1::GenerateRequest neighbour = request("def fibonacci(n):", 1500);
  neighbour.mutable_sampling()->set_ignore_eos(true);
  Call running;
  std::thread t([&] {
    auto s = stub();
    running = generate(*s, neighbour);
  });

  auto s = stub();
  const std::string name = model();
  // The request itself: an HTTP body and a gRPC message past --max-request-bytes.
  const json big_body = {{"model", name}, {"prompt", std::string(70000, 'x')}, {"max_tokens", 2}};
  expect_openai_error(curl(url("/completions"), big_body.dump(), kKey), 413, "");
  EXPECT_EQ(generate(*s, request(std::string(70000, 'x'))).status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // The prompt before tokenizing: past --max-prompt-bytes (20000), under the request size.
  const Call long_prompt = generate(*s, request(std::string(30000, 'y')));
  EXPECT_EQ(long_prompt.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(long_prompt.status.error_message(), HasSubstr("prompt: 30000 bytes"));
  expect_openai_error(curl(url("/completions"), json{{"model", name}, {"prompt", std::string(30000, 'y')}}.dump(), kKey),
                      400, "prompt");
  const json chat = {{"model", name}, {"messages", {{{"role", "user"}, {"content", std::string(30000, 'z')}}}}};
  expect_openai_error(curl(url("/chat/completions"), chat.dump(), kKey), 400, "messages");
  // Prompt tokens past the model's length, and max_tokens past what is left.
  v1::GenerateRequest ids;
  for (int i = 0; i < 4000; ++i) ids.mutable_token_ids()->add_ids(5);
  EXPECT_EQ(generate(*s, ids).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const Call too_many = generate(*s, request("def f():", 100000));
  EXPECT_EQ(too_many.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.status.error_message(), HasSubstr("max_tokens"));
  // Stop strings: their number, and one's length.
  v1::GenerateRequest stops = request("def f():");
  for (int i = 0; i < 9; ++i) stops.mutable_sampling()->add_stop("s" + std::to_string(i));
  const Call many_stops = generate(*s, stops);
  EXPECT_EQ(many_stops.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(many_stops.status.error_message(), HasSubstr("stop: 9 stop strings; at most 8"));
  expect_openai_error(curl(url("/completions"), json{{"model", name}, {"prompt", "x"}, {"stop", std::vector<std::string>(9, "s")}}.dump(), kKey),
                      400, "stop");
  expect_openai_error(curl(url("/completions"), json{{"model", name}, {"prompt", "x"}, {"stop", std::string(65, 's')}}.dump(), kKey),
                      400, "stop");
  // logprobs past 20.
  v1::GenerateRequest lp = request("def f():");
  lp.mutable_sampling()->set_logprobs(21);
  const Call logprobs = generate(*s, lp);
  EXPECT_EQ(logprobs.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(logprobs.status.error_message(), HasSubstr("logprobs"));
  // A request id that is not printable ASCII.
  v1::GenerateRequest id = request("def f():");
  id.set_request_id("a\nb");
  EXPECT_EQ(generate(*s, id).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  t.join();
  EXPECT_TRUE(running.status.ok()) << running.status.error_message();
  EXPECT_EQ(running.finish, v1::FINISH_REASON_LENGTH);
}

TEST_F(Limits, OneKeyRunsABoundedNumberOfRequests) {
  // --max-running-requests-per-key 2: two long requests of one key hold its share (and the KV
  // they reserve); its third is refused, while another key is served.
  v1::GenerateRequest long_one = request("def fibonacci(n):", 1500);
  long_one.mutable_sampling()->set_ignore_eos(true);
  struct Open {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  };
  auto s = stub();
  std::vector<std::unique_ptr<Open>> open;
  for (int i = 0; i < 2; ++i) {
    auto o = std::make_unique<Open>();
    o->ctx.AddMetadata("authorization", std::string("Bearer ") + kKey);
    o->reader = s->Generate(&o->ctx, long_one);
    v1::GenerateResponse first;
    ASSERT_TRUE(o->reader->Read(&first));  // it runs
    open.push_back(std::move(o));
  }
  const Call third = generate(*s, request("def f():"));
  EXPECT_EQ(third.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(third.status.error_message(), HasSubstr("--max-running-requests-per-key"));
  const json body = {{"model", model()}, {"prompt", "x"}, {"max_tokens", 2}};
  expect_openai_error(curl(url("/completions"), body.dump(), kKey), 429, "");
  EXPECT_TRUE(generate(*s, request("def f():"), "second-key").status.ok()) << "another key is not held back";
  for (auto& o : open) o->ctx.TryCancel();
  for (auto& o : open) (void)o->reader->Finish();
}

TEST_F(Limits, SlowHttpClientsDelayNobodyAndConnectionsAreBounded) {
  const std::string base = url("");
  const int port = std::stoi(base.substr(base.rfind(':') + 1, base.find('/', base.rfind(':')) - base.rfind(':') - 1));
  // 20 clients that begin a request and never finish its header: none holds a thread, so a probe and
  // a completion are served meanwhile; each is disconnected at --http-header-timeout-ms.
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<RawConnection>("127.0.0.1", port));
    slow.back()->send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n");
  }
  EXPECT_EQ(curl(url("/models"), "", kKey, false).status, 200);
  const json body = {{"model", model()}, {"prompt", "def f():"}, {"max_tokens", 2}};
  EXPECT_EQ(curl(url("/completions"), body.dump(), kKey).status, 200);
  for (auto& c : slow) {
    EXPECT_TRUE(c->read_until_closed()) << "a header past its deadline must end the connection";
    EXPECT_EQ(c->received(), "");
  }
  slow.clear();
  // 40 idle connections fill --max-http-connections 40: the next one is answered 503 at once. (A
  // closed connection leaves the count when the server has finished closing it, which may be
  // after the client saw it close: while such a slot is still counted an idle connection is
  // turned away instead, so the probe may find room; then one more idle connection fills it.)
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(std::make_unique<RawConnection>("127.0.0.1", port));
  HttpResult over = curl(url("/models"), "", kKey, false);
  for (int extra = 0; extra < 30 && over.status == 200; ++extra) {
    idle.push_back(std::make_unique<RawConnection>("127.0.0.1", port));
    over = curl(url("/models"), "", kKey, false);
  }
  expect_openai_error(over, 503, "");
  EXPECT_THAT(over.body, HasSubstr("--max-http-connections"));
  // They close, and the router serves again.
  idle.clear();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  while ((status = curl(url("/models"), "", kKey, false).status) != 200 && std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace baton::testing
