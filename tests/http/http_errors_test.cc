// The OpenAI-compatible HTTP API's failures on a real local cluster: malformed requests get their
// status and OpenAI-shaped error and the server keeps serving; vLLM's /tokenize and /detokenize;
// /metrics and the live page behind the key; a client that hangs up, mid-stream or before a
// non-streamed answer, has its request aborted on the nodes; a choice that is refused fails its
// request and stops the others; a router without nodes answers 503.
#include <gtest/gtest.h>

#include <thread>

#include "baton/v1/api.grpc.pb.h"
#include "tests/http/http_cluster.h"

namespace baton::testing {
namespace {

class HttpErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = cli::LocalCluster::start(
        http_cluster(chat_model_dir(), std::nullopt, "errors", {"--max-running-requests", "1", "--max-queued-requests", "0"}));
    BATON_CHECK(c.ok(), c.status().ToString());
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static std::string url(const std::string& path) { return cluster_->router_http_url() + path; }
  static void expect_still_serving() {
    const json body = {{"model", kModelName}, {"prompt", "x = ["}, {"max_tokens", 4}, {"temperature", 0}};
    const HttpResult r = curl(url("/completions"), body.dump(), kKey);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json_body()["usage"]["completion_tokens"].get<int>() > 0, true) << r.body;
  }
  static cli::LocalCluster* cluster_;
};
cli::LocalCluster* HttpErrors::cluster_ = nullptr;

TEST_F(HttpErrors, MalformedRequestsGetTheirStatusAndTheServerKeepsServing) {
  const std::string m = std::string(R"("model":")") + kModelName + R"(",)";
  struct Case {
    std::string path, body;
    int status;
    std::string param, code;
  };
  const std::vector<Case> cases = {
      {"/completions", "{\"model\":", 400, "", ""},
      {"/completions", "{" + m + R"("prompt":"x","max_tokens":"many"})", 400, "max_tokens", ""},
      {"/completions", "{" + m + R"("prompt":"x","temperature":[1]})", 400, "temperature", ""},
      {"/completions", "{" + m + R"("prompt":"x","n":200})", 400, "n", ""},
      {"/completions", "{" + m + R"("prompt":["a",{}]})", 400, "prompt[1]", ""},
      {"/completions", R"({"model":"gpt-4","prompt":"x"})", 404, "model", "model_not_found"},
      {"/chat/completions", "{" + m + R"("messages":[{"role":"user","content":7}]})", 400, "messages[0].content", ""},
      {"/chat/completions", "{" + m + R"("messages":[{"role":"user","content":"x"}],"n":0})", 400, "n", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    expect_error(curl(url(c.path), c.body, kKey), c.status, c.param, c.code);
    expect_still_serving();
  }
  // A prompt longer than the decode node allows: 400 with OpenAI's code.
  const json models = curl(url("/models"), "", kKey, false).json_body();
  const int max_len = models["data"][0]["max_model_len"];
  ASSERT_GT(max_len, 0);
  const json too_long = {{"model", kModelName}, {"prompt", std::vector<int>(static_cast<std::size_t>(max_len), 5)}};
  expect_error(curl(url("/completions"), too_long.dump(), kKey), 400, "prompt", "context_length_exceeded");
  expect_still_serving();
  // Unknown path.
  expect_error(curl(url("/embeddings"), "{}", kKey), 404, "");
}

// vLLM's /tokenize and /detokenize: the ids a completion of the same prompt counts, text back from
// its ids, chat through the template, and their errors; they need a key like /v1.
TEST_F(HttpErrors, TokenizeAndDetokenizeAsVllmDoes) {
  std::string root = cluster_->router_http_url();
  root = root.substr(0, root.size() - 3);  // without "/v1"
  const std::string text = "def add(a, b):\n    return a + b";
  const HttpResult tokenized = curl(root + "/tokenize", json{{"model", kModelName}, {"prompt", text}}.dump(), kKey);
  ASSERT_EQ(tokenized.status, 200) << tokenized.body;
  const json t = tokenized.json_body();
  ASSERT_TRUE(t["tokens"].is_array() && !t["tokens"].empty()) << tokenized.body;
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_GT(t["max_model_len"].get<int>(), 0);
  // The decode node counts the same prompt the same.
  const HttpResult completed = curl(
      url("/completions"), json{{"model", kModelName}, {"prompt", text}, {"max_tokens", 1}}.dump(), kKey);
  ASSERT_EQ(completed.status, 200) << completed.body;
  EXPECT_EQ(completed.json_body()["usage"]["prompt_tokens"], t["count"]);

  const HttpResult plain = curl(root + "/tokenize", json{{"prompt", text}, {"add_special_tokens", false}}.dump(), kKey);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const HttpResult back = curl(root + "/detokenize", json{{"model", kModelName}, {"tokens", plain.json_body()["tokens"]}}.dump(), kKey);
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(back.json_body()["prompt"], text);

  // Chat: rendered with the template; the generation prompt adds the assistant's header.
  const json messages = json::array({{{"role", "user"}, {"content", "add two numbers"}}});
  const HttpResult with_header = curl(root + "/tokenize", json{{"messages", messages}}.dump(), kKey);
  const HttpResult without = curl(
      root + "/tokenize", json{{"messages", messages}, {"add_generation_prompt", false}}.dump(), kKey);
  ASSERT_EQ(with_header.status, 200) << with_header.body;
  ASSERT_EQ(without.status, 200) << without.body;
  EXPECT_GT(with_header.json_body()["count"].get<int>(), without.json_body()["count"].get<int>());
  const HttpResult chat_text = curl(root + "/detokenize", json{{"tokens", with_header.json_body()["tokens"]}}.dump(), kKey);
  EXPECT_NE(chat_text.json_body()["prompt"].get<std::string>().find("add two numbers"), std::string::npos)
      << chat_text.body;

  expect_error(curl(root + "/tokenize", json{{"prompt", "x"}, {"messages", messages}}.dump(), kKey), 400, "messages");
  expect_error(curl(root + "/tokenize", json{{"prompt", 7}}.dump(), kKey), 400, "prompt");
  expect_error(curl(root + "/tokenize", json{{"model", "gpt-4"}, {"prompt", "x"}}.dump(), kKey), 404, "model",
               "model_not_found");
  expect_error(curl(root + "/detokenize", json{{"tokens", {1, -1}}}.dump(), kKey), 400, "tokens[1]");
  expect_error(curl(root + "/detokenize", json{{"tokens", "1 2"}}.dump(), kKey), 400, "tokens");
  expect_error(curl(root + "/tokenize", json{{"prompt", "x"}}.dump()), 401, "", "invalid_api_key");
  expect_still_serving();
}

// GET /metrics on the API port, as vLLM serves it: the router's families, behind the API key.
TEST_F(HttpErrors, MetricsOnTheApiPortNeedTheKey) {
  std::string root = cluster_->router_http_url();
  root = root.substr(0, root.size() - 3);
  expect_still_serving();  // at least one request counted
  const HttpResult m = curl(root + "/metrics", "", kKey, /*post=*/false);
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_NE(m.headers.find("text/plain; version=0.0.4"), std::string::npos) << m.headers;
  EXPECT_NE(m.body.find("baton_router_requests_total{"), std::string::npos);
  EXPECT_NE(m.body.find("baton_router_request_state_entered_total{"), std::string::npos);
  EXPECT_NE(m.body.find("baton_time_to_first_token_seconds_bucket"), std::string::npos);
  EXPECT_EQ(curl(root + "/metrics", "", "", /*post=*/false).status, 401);
}

TEST_F(HttpErrors, ApiKeysGuardTheApiAndTheLivePageButNotHealth) {
  const std::string body = json{{"model", kModelName}, {"prompt", "x"}, {"max_tokens", 2}}.dump();
  expect_error(curl(url("/completions"), body), 401, "", "invalid_api_key");
  expect_error(curl(url("/completions"), body, "wrong-key"), 401, "", "invalid_api_key");
  expect_error(curl(url("/models"), "", "", false), 401, "", "invalid_api_key");
  // The key is named nowhere in a refusal.
  EXPECT_EQ(curl(url("/completions"), body, "wrong-key").body.find("wrong-key"), std::string::npos);
  const std::string root = url("").substr(0, url("").size() - 3);  // without "/v1"
  EXPECT_EQ(curl(root + "/health", "", "", false).status, 200);
  EXPECT_EQ(curl(root + "/live", "", "", false).status, 200);
  // The live page needs the key too; a browser is asked for it (any user name, the key as password).
  const HttpResult page = curl(root + "/dashboard", "", "", false);
  EXPECT_EQ(page.status, 401);
  EXPECT_NE(page.headers.find("WWW-Authenticate: Basic"), std::string::npos) << page.headers;
  EXPECT_EQ(curl(root + "/dashboard/data", "", "", false).status, 401);
  EXPECT_EQ(curl(root + "/dashboard", "", "", false, {"-u", std::string("me:") + kKey}).status, 200);
  EXPECT_EQ(curl(root + "/dashboard/data", "", kKey, false).status, 200);
  EXPECT_EQ(curl(root + "/dashboard/data", "", "", false, {"-u", "me:wrong-key"}).status, 401);
  expect_error(curl(root + "/dashboard/missing.js", "", kKey, false), 404, "", "not_found");
  expect_still_serving();
}

TEST_F(HttpErrors, HangingUpMidStreamAbortsOnTheNodesAndFreesTheSlot) {
  const std::string base = cluster_->router_http_url();  // http://HOST:PORT/v1
  const std::string host_port = base.substr(7, base.size() - 7 - 3);
  const std::string host = host_port.substr(0, host_port.rfind(':'));
  const int port = std::stoi(host_port.substr(host_port.rfind(':') + 1));
  const std::string decode = cluster_->nodes("decode")[0]->address;
  std::string request_id;
  {
    // A long stream (ignore_eos: it cannot end early), read up to its first token.
    RawConnection c(host, port);
    const json body = {{"model", kModelName}, {"prompt", "def f():"}, {"max_tokens", 1500}, {"ignore_eos", true},
                       {"temperature", 0}, {"stream", true}};
    c.post("/v1/completions", body.dump(), kKey);
    ASSERT_TRUE(c.read_until("\"text\"")) << c.received();
    ASSERT_NE(c.received().find("HTTP/1.1 200"), std::string::npos) << c.received();
    const std::string& got = c.received();
    const std::size_t id_at = got.find("\"id\":\"cmpl-");
    ASSERT_NE(id_at, std::string::npos) << got;
    request_id = got.substr(id_at + 11, got.find('"', id_at + 11) - id_at - 11);
    // --max-running-requests 1 and no queue: while it runs, another request is refused with 429.
    const json other = {{"model", kModelName}, {"prompt", "x"}, {"max_tokens", 2}};
    const HttpResult refused = curl(url("/completions"), other.dump(), kKey);
    expect_error(refused, 429, "", "rate_limit_exceeded");
    EXPECT_NE(refused.headers.find("Retry-After: 1"), std::string::npos) << refused.headers;
    {
      // The gRPC API shares the limit (and the keys): RESOURCE_EXHAUSTED.
      auto stub = v1::Baton::NewStub(grpc::CreateChannel(cluster_->router_address(), grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      ctx.AddMetadata("authorization", std::string("Bearer ") + kKey);
      v1::GenerateRequest r;
      r.set_text("x");
      auto reader = stub->Generate(&ctx, r);
      v1::GenerateResponse m;
      while (reader->Read(&m)) {
      }
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
    EXPECT_EQ(decode_load(decode).num_running(), 1) << "the stream should still run on the decode node";
    c.close();
  }
  // The router saw the hang-up and stopped the request on the decode node (it logs an abort only
  // for a request that stopped before its end), and the decode node holds nothing afterwards.
  auto line = cluster_->router().process->wait_for_line(str_cat("router: aborted ", request_id, ".1 on decode node"),
                                                        std::chrono::seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  expect_decode_idle_soon(decode);
  expect_still_serving();  // the slot is free again: not 429
}

// One choice that cannot run fails the whole request, and the others are stopped, not left
// running: with --max-running-requests 1 and no queue, one of n = 2 long choices is admitted and
// the other refused, so the answer is that 429 and the admitted one is cancelled on the nodes.
TEST_F(HttpErrors, AChoiceThatIsRefusedFailsTheRequestAndStopsTheOthers) {
  const std::string decode = cluster_->nodes("decode")[0]->address;
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    const json body = {{"model", kModelName}, {"prompt", "def h():"}, {"n", 2}, {"max_tokens", 1500},
                       {"ignore_eos", true}, {"temperature", 0}, {"stream", stream}};
    const HttpResult r = curl(url("/completions"), body.dump(), kKey);
    if (!stream || r.status != 200) {
      expect_error(r, 429, "", "rate_limit_exceeded");
    } else {
      // The admitted choice may have started the stream first: then the refusal is its error event.
      const std::vector<std::string> events = sse_events(r.body);
      ASSERT_GE(events.size(), 2u) << r.body;
      EXPECT_EQ(events.back(), "[DONE]");
      EXPECT_EQ(json::parse(events[events.size() - 2])["error"]["code"], "rate_limit_exceeded") << r.body;
    }
    expect_decode_idle_soon(decode);
    expect_still_serving();
  }
}

TEST_F(HttpErrors, HangingUpBeforeANonStreamedAnswerAbortsOnTheNodes) {
  const std::string base = cluster_->router_http_url();
  const std::string host_port = base.substr(7, base.size() - 7 - 3);
  const std::string decode = cluster_->nodes("decode")[0]->address;
  {
    RawConnection c(host_port.substr(0, host_port.rfind(':')), std::stoi(host_port.substr(host_port.rfind(':') + 1)));
    const json body = {{"model", kModelName}, {"prompt", "def g():"}, {"max_tokens", 1500}, {"ignore_eos", true},
                       {"temperature", 0}, {"request_id", "hang-up-plain"}};
    c.post("/v1/completions", body.dump(), kKey);
    // Nothing is written to this client before the end: wait until the decode node runs it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (decode_load(decode).num_running() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(decode_load(decode).num_running(), 1);
    c.close();
  }
  // Nodes know a client's own id with the router's random suffix ("hang-up-plain~<16 hex>.1").
  auto line = cluster_->router().process->wait_for_line("router: aborted hang-up-plain~", std::chrono::seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_NE(line->find(".1 on decode node"), std::string::npos) << *line;
  expect_decode_idle_soon(decode);
  expect_still_serving();
}

// A router whose only decode node is not there: not healthy (503), requests 503, still live.
TEST(HttpWithoutNodes, HealthAndRequestsAre503) {
  auto path = cli::LocalCluster::find_binary("baton-router", BATON_BINARY_DIR);
  ASSERT_TRUE(path.ok()) << path.status();
  Subprocess::Options o;
  o.argv = {*path, "--insecure", "--model", chat_model_dir(), "--decode", "127.0.0.1:1", "--http-port", "0",
            "--node-timeout-ms", "500"};
  auto router = Subprocess::start(std::move(o));
  ASSERT_TRUE(router.ok()) << router.status();
  auto line = (*router)->wait_for_line("baton-router http on ", std::chrono::seconds(60));
  ASSERT_TRUE(line.ok()) << line.status();
  std::string base = line->substr(line->find("http://"));
  base = base.substr(0, base.find_first_of(" \r\n"));
  const std::string root = base.substr(0, base.size() - 3);
  EXPECT_EQ(curl(root + "/live", "", "", false).status, 200);
  expect_error(curl(root + "/health", "", "", false), 503, "");
  const json body = {{"model", kModelName}, {"prompt", "x"}, {"max_tokens", 2}};
  expect_error(curl(base + "/completions", body.dump()), 503, "", "service_unavailable");
}

}  // namespace
}  // namespace baton::testing
