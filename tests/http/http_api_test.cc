// The OpenAI-compatible HTTP API of a real local cluster (router, prefill and decode processes on
// loopback, started as `baton up` starts them): curl and the official `openai` npm client, streamed
// and not, completions and chat, get exactly the text of local `baton generate` (greedy, with and
// without speculation in the cluster); malformed requests get their status and OpenAI-shaped
// error and the server keeps serving; a client that hangs up mid-stream has its request aborted
// on the nodes.
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "baton/v1/api.grpc.pb.h"
#include "baton/v1/node.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/http/http_support.h"

namespace baton::testing {
namespace {

constexpr const char* kKey = "test-key";
constexpr const char* kModelName = "baton-tiny-chat";

cli::ClusterOptions http_cluster(const std::string& model, const std::optional<std::string>& spec,
                                 const std::string& name, std::vector<std::string> router_args) {
  cli::ClusterOptions o;
  o.model_dir = model;
  o.speculative_config = spec;
  o.bin_dir = BATON_BINARY_DIR;
  o.log_dir = scratch_path("baton-http-" + name).string();
  o.node_args = {"--kv-cache-memory", "0.125"};
  o.http_port = 0;
  o.api_keys_file = (std::filesystem::path(o.log_dir) / "api-keys").string();
  std::filesystem::create_directories(o.log_dir);
  std::ofstream(o.api_keys_file) << "# the test's key\n" << kKey << "\n";
  o.router_args = router_args;
  o.start_timeout = std::chrono::seconds(120);
  return o;
}

const std::vector<std::string>& prompts() {
  static const std::vector<std::string> p = {"def fibonacci(n):", "class Stack:\n    def __init__(self):\n"};
  return p;
}
const char* kChat = R"([{"role":"system","content":"You write Python."},{"role":"user","content":"def add(a, b):"}])";
constexpr int kMaxTokens = 24;

struct Reference {
  std::vector<json> completions;  // per prompt
  json chat;
};

const Reference& reference(const std::string& model) {
  static const Reference r = [&] {
    Reference out;
    const std::string n = std::to_string(kMaxTokens);
    for (const std::string& p : prompts()) {
      out.completions.push_back(baton_generate(model, {"--prompt", p, "--max-tokens", n, "--temperature", "0"}));
    }
    out.chat = baton_generate(model, {"--chat", kChat, "--max-tokens", n, "--temperature", "0"});
    return out;
  }();
  return r;
}

struct SpecCase {
  std::string label;
  std::optional<std::string> config;
};

void PrintTo(const SpecCase& c, std::ostream* os) { *os << c.label; }

class HttpEquivalence : public ::testing::TestWithParam<SpecCase> {};

TEST_P(HttpEquivalence, CurlAndOpenAiClientEqualBatonGenerate) {
  const std::string model = chat_model_dir();
  const Reference& ref = reference(model);
  auto cluster = cli::LocalCluster::start(http_cluster(model, GetParam().config, GetParam().label, {}));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string base = (*cluster)->router_http_url();
  ASSERT_FALSE(base.empty());
  const bool speculative = GetParam().config.has_value();

  // curl: /v1/models, then each prompt non-streamed and streamed.
  const HttpResult models = curl(base + "/models", "", kKey, /*post=*/false);
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.json_body()["data"][0]["id"], kModelName);
  for (std::size_t i = 0; i < prompts().size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const json& expected = ref.completions[i];
    json body = {{"model", kModelName}, {"prompt", prompts()[i]}, {"max_tokens", kMaxTokens}, {"temperature", 0}};
    const HttpResult plain = curl(base + "/completions", body.dump(), kKey);
    ASSERT_EQ(plain.status, 200) << plain.body;
    const json got = plain.json_body();
    EXPECT_EQ(got["object"], "text_completion");
    EXPECT_EQ(got["choices"][0]["text"], expected["text"]);
    EXPECT_EQ(got["choices"][0]["finish_reason"], expected["finish_reason"]);
    EXPECT_EQ(got["usage"]["completion_tokens"], expected["generated_tokens"]);
    EXPECT_EQ(got["usage"]["prompt_tokens"], expected["prompt_tokens"]);
    if (speculative) {
      EXPECT_GT(got["usage"]["speculation"]["num_drafts"].get<int>(), 0);
    }

    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const HttpResult streamed = curl(base + "/completions", body.dump(), kKey);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const std::vector<std::string> events = sse_events(streamed.body);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    json finish, usage;
    for (std::size_t e = 0; e + 1 < events.size(); ++e) {
      const json chunk = json::parse(events[e]);
      EXPECT_EQ(chunk["object"], "text_completion");
      for (const json& c : chunk["choices"]) {
        text += c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      }
      if (!chunk["usage"].is_null()) usage = chunk["usage"];
    }
    EXPECT_EQ(text, expected["text"]);
    EXPECT_EQ(finish, expected["finish_reason"]);
    EXPECT_TRUE(json::parse(events[events.size() - 2])["choices"].empty()) << "the usage chunk comes last";
    EXPECT_EQ(usage["completion_tokens"], expected["generated_tokens"]);
  }

  // logit_bias: +100 forces a token at every position, through verification of the head's drafts
  // too (they never propose it).
  {
    const HttpResult tokenized =
        curl(base.substr(0, base.size() - 3) + "/tokenize", json{{"prompt", "x"}, {"add_special_tokens", false}}.dump(), kKey);
    ASSERT_EQ(tokenized.status, 200) << tokenized.body;
    ASSERT_EQ(tokenized.json_body()["tokens"].size(), 1u) << tokenized.body;
    const int x = tokenized.json_body()["tokens"][0];
    const json body = {{"model", kModelName}, {"prompt", prompts()[0]}, {"max_tokens", kMaxTokens}, {"temperature", 0},
                       {"logit_bias", {{std::to_string(x), 100}}}};
    const HttpResult forced = curl(base + "/completions", body.dump(), kKey);
    ASSERT_EQ(forced.status, 200) << forced.body;
    EXPECT_EQ(forced.json_body()["choices"][0]["text"], std::string(static_cast<std::size_t>(kMaxTokens), 'x'));
    EXPECT_EQ(forced.json_body()["usage"]["completion_tokens"], kMaxTokens);
  }

  // n and a list of prompts: every choice is its own request, in OpenAI's order (prompt p's sample j
  // is choice p * n + j); greedy choices are the reference's, usage counts each prompt once and
  // every choice's tokens.
  {
    const json body = {{"model", kModelName}, {"prompt", {prompts()[0], prompts()[1]}}, {"n", 2},
                       {"max_tokens", kMaxTokens}, {"temperature", 0}};
    const HttpResult r = curl(base + "/completions", body.dump(), kKey);
    ASSERT_EQ(r.status, 200) << r.body;
    const json got = r.json_body();
    ASSERT_EQ(got["choices"].size(), 4u) << r.body;
    int completion = 0;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got["choices"][i]["index"], i);
      EXPECT_EQ(got["choices"][i]["text"], ref.completions[i / 2]["text"]) << i;
      EXPECT_EQ(got["choices"][i]["finish_reason"], ref.completions[i / 2]["finish_reason"]) << i;
      completion += ref.completions[i / 2]["generated_tokens"].get<int>();
    }
    EXPECT_EQ(got["usage"]["completion_tokens"], completion);
    EXPECT_EQ(got["usage"]["prompt_tokens"],
              ref.completions[0]["prompt_tokens"].get<int>() + ref.completions[1]["prompt_tokens"].get<int>());

    // Streamed chat with n = 2: both choices' chunks, each with its index, then one usage chunk.
    const json chat = {{"model", kModelName}, {"messages", json::parse(kChat)}, {"n", 2}, {"max_tokens", kMaxTokens},
                       {"temperature", 0}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
    const HttpResult streamed = curl(base + "/chat/completions", chat.dump(), kKey);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const std::vector<std::string> events = sse_events(streamed.body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text[2];
    json finish[2];
    int usages = 0, roles = 0;
    for (std::size_t e = 0; e + 1 < events.size(); ++e) {
      const json chunk = json::parse(events[e]);
      EXPECT_TRUE(chunk["id"] == json::parse(events[0])["id"]) << "one id for the whole stream";
      if (!chunk["usage"].is_null()) {
        ++usages;
        EXPECT_EQ(chunk["usage"]["completion_tokens"], 2 * ref.chat["generated_tokens"].get<int>());
        EXPECT_EQ(chunk["usage"]["prompt_tokens"], ref.chat["prompt_tokens"]);
      }
      for (const json& c : chunk["choices"]) {
        const int i = c["index"];
        ASSERT_TRUE(i == 0 || i == 1) << chunk.dump();
        if (c["delta"].contains("role")) ++roles;
        if (c["delta"].contains("content")) text[i] += c["delta"]["content"].get<std::string>();
        if (!c["finish_reason"].is_null()) finish[i] = c["finish_reason"];
      }
    }
    EXPECT_EQ(usages, 1);
    EXPECT_EQ(roles, 2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(text[i], ref.chat["text"]) << i;
      EXPECT_EQ(finish[i], ref.chat["finish_reason"]) << i;
    }

    // Seeded samples: choice j draws as a request of its own with seed + j does.
    const auto sampled = [&](int n, int seed) {
      const json b = {{"model", kModelName}, {"prompt", prompts()[1]}, {"n", n}, {"max_tokens", kMaxTokens},
                      {"temperature", 0.9}, {"seed", seed}};
      const HttpResult s = curl(base + "/completions", b.dump(), kKey);
      EXPECT_EQ(s.status, 200) << s.body;
      const json answer = s.json_body();
      std::vector<std::string> texts;
      for (const json& c : answer["choices"]) texts.push_back(c["text"]);
      return texts;
    };
    const std::vector<std::string> three = sampled(3, 41);
    ASSERT_EQ(three.size(), 3u);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(std::vector<std::string>{three[static_cast<std::size_t>(j)]}, sampled(1, 41 + j)) << j;
  }

  // The official client: completions and chat, streamed and not.
  json cases = json::array();
  for (bool stream : {false, true}) {
    for (const std::string& p : prompts()) {
      cases.push_back({{"kind", "completion"}, {"stream", stream},
                       {"params", {{"model", kModelName}, {"prompt", p}, {"max_tokens", kMaxTokens}, {"temperature", 0}}}});
    }
    json chat = {{"model", kModelName}, {"messages", json::parse(kChat)}, {"max_tokens", kMaxTokens}, {"temperature", 0}};
    if (stream) chat["stream_options"] = {{"include_usage", true}};
    cases.push_back({{"kind", "chat"}, {"stream", stream}, {"params", chat}});
  }
  const ProcessOutput node =
      run_program({"/usr/bin/node", source_path("tests/http/client/openai_check.mjs"), base, kKey, cases.dump()});
  ASSERT_EQ(node.code, 0) << node.out;
  const std::size_t at = node.out.find("RESULT ");
  ASSERT_NE(at, std::string::npos) << node.out;
  const json results = json::parse(node.out.substr(at + 7, node.out.find('\n', at) - at - 7));
  ASSERT_EQ(results.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].dump());
    const json& r = results[i];
    ASSERT_FALSE(r.contains("error")) << r.dump();
    const bool chat = cases[i]["kind"] == "chat";
    const json& expected = chat ? ref.chat : ref.completions[i % 3];
    EXPECT_EQ(r["text"], expected["text"]);
    EXPECT_EQ(r["finish_reason"], expected["finish_reason"]);
    const bool stream = cases[i]["stream"];
    EXPECT_EQ(r["object"], chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    if (chat && stream) {
      EXPECT_EQ(r["role"], "assistant");
    }
    if (!stream || chat) {
      EXPECT_EQ(r["usage"]["completion_tokens"], expected["generated_tokens"]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Speculation, HttpEquivalence,
    ::testing::Values(SpecCase{"none", std::nullopt},
                      SpecCase{"eagle3", R"({"method":"eagle3","model":")" + source_path("models/baton-tiny-code/eagle3") +
                                             R"(","num_speculative_tokens":4})"}),
    [](const ::testing::TestParamInfo<SpecCase>& i) { return i.param.label; });

// ---- errors, limits and a client that hangs up ------------------------------------------------

void expect_error(const HttpResult& r, int status, const std::string& param, const std::string& code = "") {
  EXPECT_EQ(r.status, status) << r.body;
  const json b = r.json_body();
  ASSERT_TRUE(b.is_object() && b.contains("error")) << r.body;
  const json& e = b["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << r.body;
  } else {
    EXPECT_EQ(e["param"], param) << r.body;
  }
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.body;
  }
}

node::v1::NodeLoad decode_load(const std::string& address) {
  auto stub = node::v1::DecodeNode::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::NodeInfo info;
  const grpc::Status s = stub->Info(&ctx, node::v1::InfoRequest(), &info);
  BATON_CHECK(s.ok(), s.error_message());
  return info.load();
}

bool decode_idle(const node::v1::NodeLoad& load) {
  if (load.num_running() != 0 || load.num_waiting() != 0) return false;
  for (const auto& pool : load.pools()) {
    if (pool.used() != 0 || pool.reserved() != 0) return false;
  }
  return true;
}

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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!decode_idle(decode_load(decode)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(decode_idle(decode_load(decode))) << decode_load(decode).DebugString();
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
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!decode_idle(decode_load(decode)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    EXPECT_TRUE(decode_idle(decode_load(decode))) << decode_load(decode).DebugString();
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!decode_idle(decode_load(decode)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(decode_idle(decode_load(decode))) << decode_load(decode).DebugString();
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
