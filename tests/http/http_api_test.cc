// The OpenAI-compatible HTTP API of a real local cluster (router, prefill and decode processes on
// loopback, started as `baton up` starts them): curl and the official `openai` npm client, streamed
// and not, completions and chat, get exactly the text of local `baton generate` (greedy, with and
// without speculation in the cluster), also with logit_bias, n and lists of prompts. Errors,
// limits and hang-ups: http_errors_test.cc.
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "baton/v1/api.grpc.pb.h"
#include "baton/v1/node.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/http/http_cluster.h"

namespace baton::testing {
namespace {

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
  const json results = openai_client(base, kKey, cases);
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

}  // namespace
}  // namespace baton::testing
