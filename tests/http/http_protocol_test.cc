// The OpenAI protocol conversion on its own: request bodies to baton.v1 GenerateRequests (every
// rejection a 400 naming the field, the unknown model a 404), the router's status codes to HTTP
// statuses, and responses in OpenAI's shapes (body, stream chunks, usage chunk).
#include <gtest/gtest.h>

#include <variant>

#include "router/http/api_error.h"
#include "router/http/openai_request.h"
#include "router/http/openai_response.h"

namespace baton::router::http {
namespace {

using nlohmann::json;

constexpr const char* kModel = "tiny";

OpenAiRequest ok(Endpoint e, const json& body) {
  auto r = parse_request(e, body.dump(), kModel);
  if (auto* err = std::get_if<ApiError>(&r)) ADD_FAILURE() << err->message;
  return std::holds_alternative<OpenAiRequest>(r) ? std::get<OpenAiRequest>(r) : OpenAiRequest{};
}

ApiError rejected(Endpoint e, const std::string& body) {
  auto r = parse_request(e, body, kModel);
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "accepted: " << body;
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(OpenAiRequest, CompletionFieldsBecomeSampling) {
  const OpenAiRequest r = ok(Endpoint::kCompletions,
                             {{"model", kModel}, {"prompt", "def f():"}, {"max_tokens", 7}, {"temperature", 0},
                              {"top_p", 0.5}, {"seed", 42}, {"stop", {"\n\n", "x"}}, {"logprobs", 3}, {"n", 1},
                              {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(r.generate.text(), "def f():");
  const auto& s = r.generate.sampling();
  EXPECT_EQ(s.max_tokens(), 7);
  EXPECT_FLOAT_EQ(s.temperature(), 0.0f);
  EXPECT_FLOAT_EQ(s.top_p(), 0.5f);
  EXPECT_EQ(s.seed(), 42u);
  ASSERT_EQ(s.stop_size(), 2);
  EXPECT_EQ(s.stop(0), "\n\n");
  EXPECT_EQ(s.logprobs(), 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.want_logprobs);
}

TEST(OpenAiRequest, PromptForms) {
  EXPECT_EQ(ok(Endpoint::kCompletions, {{"model", kModel}, {"prompt", {1, 2, 3}}}).generate.token_ids().ids_size(), 3);
  EXPECT_EQ(ok(Endpoint::kCompletions, {{"model", kModel}, {"prompt", {"one"}}}).generate.text(), "one");
  EXPECT_EQ(ok(Endpoint::kCompletions, {{"model", kModel}, {"prompt", {{5, 6}}}}).generate.token_ids().ids_size(), 2);
  const OpenAiRequest s = ok(Endpoint::kCompletions, {{"model", kModel}, {"prompt", "x"}, {"stop", "END"}});
  ASSERT_EQ(s.generate.sampling().stop_size(), 1);
  EXPECT_FALSE(s.generate.sampling().has_max_tokens());  // the proto default (16) is OpenAI's too
}

TEST(OpenAiRequest, ChatMessagesAndLogprobs) {
  const OpenAiRequest r = ok(
      Endpoint::kChat,
      {{"model", kModel},
       {"messages", {{{"role", "system"}, {"content", "be brief"}},
                     {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
       {"max_completion_tokens", 5},
       {"logprobs", true},
       {"top_logprobs", 2}});
  ASSERT_EQ(r.generate.chat().messages_size(), 2);
  EXPECT_EQ(r.generate.chat().messages(1).role(), "user");
  EXPECT_EQ(r.generate.chat().messages(1).content(), "ab");
  EXPECT_EQ(r.generate.sampling().max_tokens(), 5);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_EQ(r.generate.sampling().logprobs(), 2);
  EXPECT_FALSE(ok(Endpoint::kChat, {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "x"}}}}})
                   .generate.sampling()
                   .has_logprobs());
}

TEST(OpenAiRequest, LogitBiasKeysAreTokenIds) {
  const OpenAiRequest r = ok(Endpoint::kCompletions, json::parse(R"({"model":"tiny","prompt":"x",
      "logit_bias":{"5":-100,"17":2.5,"0":100}})"));
  const auto& bias = r.generate.sampling().logit_bias();
  ASSERT_EQ(bias.size(), 3u);
  EXPECT_EQ(bias.at(5), -100.0f);
  EXPECT_EQ(bias.at(17), 2.5f);
  EXPECT_EQ(bias.at(0), 100.0f);
  EXPECT_TRUE(ok(Endpoint::kCompletions, json::parse(R"({"model":"tiny","prompt":"x","logit_bias":{}})"))
                  .generate.sampling()
                  .logit_bias()
                  .empty());
}

// n and a list of prompts: every choice's request in OpenAI's order (prompt p's sample j is choice
// p * n + j), the body's sampling on each, seed + j for sample j, and request ids that stay unique.
TEST(OpenAiRequest, ChoicesArePromptsTimesN) {
  const OpenAiRequest r = ok(Endpoint::kCompletions, json::parse(R"({"model":"tiny","prompt":["a",[5,6]],"n":3,
      "seed":10,"max_tokens":7,"request_id":"job","logit_bias":{"4":1}})"));
  EXPECT_EQ(r.n, 3);
  const std::vector<baton::v1::GenerateRequest> c = choice_requests(r);
  ASSERT_EQ(c.size(), 6u);
  for (std::size_t i = 0; i < c.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(c[i].has_text(), i < 3);
    if (i >= 3) {
      EXPECT_EQ(c[i].token_ids().ids_size(), 2);
    }
    EXPECT_EQ(c[i].sampling().seed(), 10 + i % 3);
    EXPECT_EQ(c[i].sampling().max_tokens(), 7);
    EXPECT_EQ(c[i].sampling().logit_bias().at(4), 1.0f);
    EXPECT_EQ(c[i].request_id(), "job-" + std::to_string(i));
  }
  EXPECT_EQ(c[0].text(), "a");
  // One choice keeps its request as it is.
  const OpenAiRequest one = ok(Endpoint::kChat, json::parse(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
      "seed":10,"request_id":"job"})"));
  ASSERT_EQ(choice_requests(one).size(), 1u);
  EXPECT_EQ(choice_requests(one)[0].request_id(), "job");
  EXPECT_EQ(choice_requests(one)[0].sampling().seed(), 10u);
  EXPECT_EQ(choice_requests(one)[0].chat().messages_size(), 1);
  // Unseeded samples draw their own seeds on the nodes.
  const OpenAiRequest unseeded = ok(Endpoint::kChat, json::parse(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
      "n":2})"));
  for (const auto& g : choice_requests(unseeded)) EXPECT_FALSE(g.sampling().has_seed());
}

// response_format travels as JSON text, a schema's properties in the order the client wrote them.
TEST(OpenAiRequest, ResponseFormatKeepsTheSchemaAsWritten) {
  const std::string body = R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"response_format":
      {"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"zeta":{"type":"integer"},
      "alpha":{"type":"string"}}}}}})";
  auto parsed = parse_request(Endpoint::kChat, body, "tiny");
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(parsed));
  const std::string& format = std::get<OpenAiRequest>(parsed).generate.sampling().response_format();
  EXPECT_LT(format.find("zeta"), format.find("alpha")) << format;
  EXPECT_EQ(ok(Endpoint::kChat, json::parse(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_object"}})")).generate.sampling().response_format(), R"({"type":"json_object"})");
  EXPECT_TRUE(ok(Endpoint::kChat, json::parse(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"text"}})")).generate.sampling().response_format().empty());
}

struct BadCase {
  Endpoint endpoint;
  std::string body;
  int status;
  std::string param;  // "" : null
  std::string code;   // "" : null
};

// The neutral values of fields this server does not implement are what clients send by default:
// they are accepted.
TEST(OpenAiRequest, NeutralValuesOfUnimplementedFieldsAreAccepted) {
  ok(Endpoint::kChat, json::parse(R"({"model":"tiny","messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":"y","tool_calls":[]}],"tools":[],"tool_choice":"none",
      "response_format":{"type":"text"},"logit_bias":{},"modalities":["text"],"parallel_tool_calls":true,
      "user":"u1"})"));
  ok(Endpoint::kCompletions,
     json::parse(R"({"model":"tiny","prompt":"x","echo":false,"suffix":"","best_of":1,"logit_bias":null})"));
}

TEST(OpenAiRequest, EveryRejectionNamesItsField) {
  const std::string m = R"("model":"tiny",)";
  const std::vector<BadCase> cases = {
      {Endpoint::kCompletions, "{not json", 400, "", ""},
      {Endpoint::kCompletions, "[1,2]", 400, "", ""},
      {Endpoint::kCompletions, R"({"prompt":"x"})", 400, "model", ""},
      {Endpoint::kCompletions, R"({"model":7,"prompt":"x"})", 400, "model", ""},
      {Endpoint::kCompletions, R"({"model":"other","prompt":"x"})", 404, "model", "model_not_found"},
      {Endpoint::kCompletions, R"({"model":"tiny"})", 400, "prompt", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":5})", 400, "prompt", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":[]})", 400, "prompt", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":["a",5]})", 400, "prompt[1]", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":[1,"b"]})", 400, "prompt[1]", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":[1,-2]})", 400, "prompt[1]", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","n":129})", 400, "n", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":["a","b","c"],"n":50})", 400, "n", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","n":0})", 400, "n", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","max_tokens":"7"})", 400, "max_tokens", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","max_tokens":0})", 400, "max_tokens", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","max_tokens":1.5})", 400, "max_tokens", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","temperature":2.5})", 400, "temperature", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","temperature":"hot"})", 400, "temperature", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","top_p":0})", 400, "top_p", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","seed":"s"})", 400, "seed", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","stop":3})", 400, "stop", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","stop":["a",3]})", 400, "stop[1]", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","logprobs":21})", 400, "logprobs", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","logprobs":true})", 400, "logprobs", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","stream":"yes"})", 400, "stream", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","stream_options":{"include_usage":true}})", 400,
       "stream_options", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","stream":true,"stream_options":{"include_usage":1}})", 400,
       "stream_options.include_usage", ""},
      {Endpoint::kCompletions, "{" + m + R"("messages":[]})", 400, "messages", ""},
      {Endpoint::kChat, R"({"model":"tiny"})", 400, "messages", ""},
      {Endpoint::kChat, "{" + m + R"("messages":"hi"})", 400, "messages", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"content":"hi"}]})", 400, "messages[0].role", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":5}]})", 400, "messages[0].content", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":[{"type":"image_url"}]}]})", 400,
       "messages[0].content[0]", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"logprobs":2})", 400, "logprobs", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"top_logprobs":2})", 400,
       "top_logprobs", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"n":"3"})", 400, "n", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"request_id":1})", 400, "request_id", ""},
      // What this server does not implement is refused, naming the field, never silently dropped.
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})", 400,
       "tools[0].function", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", 400,
       "tool_choice", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]})", 400,
       "functions", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}})",
       400, "response_format", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}})",
       400, "response_format", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"response_format":"json"})", 400,
       "response_format", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"logit_bias":{"five":-100}})", 400,
       "logit_bias", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"logit_bias":{"-5":1}})", 400,
       "logit_bias", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"logit_bias":{"5":101}})", 400,
       "logit_bias", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"logit_bias":{"5":"a lot"}})", 400,
       "logit_bias", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","logit_bias":[5]})", 400, "logit_bias", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"prediction":{"type":"content","content":"y"}})",
       400, "prediction", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"user","content":"x"}],"modalities":["text","audio"]})", 400,
       "modalities", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"assistant","tool_calls":[{"id":"c1"}]}]})", 400,
       "messages[0].tool_calls[0]", ""},
      {Endpoint::kChat, "{" + m + R"("messages":[{"role":"function","content":"42"}]})", 400, "messages[0].role", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","echo":true})", 400, "echo", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","suffix":"}"})", 400, "suffix", ""},
      {Endpoint::kCompletions, "{" + m + R"("prompt":"x","best_of":3})", 400, "best_of", ""},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = rejected(c.endpoint, c.body);
    EXPECT_EQ(e.status, c.status) << e.message;
    EXPECT_EQ(e.param, c.param) << e.message;
    EXPECT_EQ(e.code, c.code);
    EXPECT_FALSE(e.message.empty());
    if (!c.param.empty() && c.status == 400) {
      EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message;
    }
    const json body = e.body();
    ASSERT_TRUE(body["error"].is_object());
    for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(body["error"].contains(k)) << k;
    EXPECT_EQ(body["error"]["param"].is_null(), c.param.empty());
  }
}

TEST(ApiError, StatusCodesMapToHttp) {
  EXPECT_EQ(from_status(absl::InvalidArgumentError("bad"), "prompt").status, 400);
  EXPECT_EQ(from_status(absl::InvalidArgumentError("bad"), "prompt").param, "prompt");
  const ApiError too_long = from_status(
      absl::InvalidArgumentError("prompt (3000 tokens) + sampling.max_tokens (16) = 3016 exceeds max_model_len 2048"),
      "prompt");
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.code, "context_length_exceeded");
  EXPECT_EQ(from_status(absl::ResourceExhaustedError("full")).status, 429);
  EXPECT_EQ(from_status(absl::UnavailableError("no node")).status, 503);
  EXPECT_EQ(from_status(absl::FailedPreconditionError("cannot pair")).status, 503);
  EXPECT_EQ(from_status(absl::DeadlineExceededError("slow")).status, 504);
  EXPECT_EQ(from_status(absl::InternalError("bug")).status, 500);
  EXPECT_EQ(from_status(absl::AlreadyExistsError("dup")).status, 409);
}

baton::v1::GenerateResponse message(const std::string& text, std::vector<int> ids,
                                    baton::v1::FinishReason finish = baton::v1::FINISH_REASON_UNSPECIFIED) {
  baton::v1::GenerateResponse m;
  m.set_text(text);
  for (int id : ids) m.add_token_ids(id);
  m.set_finish_reason(finish);
  if (finish != baton::v1::FINISH_REASON_UNSPECIFIED) {
    m.mutable_usage()->set_prompt_tokens(4);
    m.mutable_usage()->set_completion_tokens(static_cast<int>(ids.size()) + 1);
    m.mutable_usage()->mutable_speculation()->set_num_drafts(2);
  }
  return m;
}

ResponseContext context(Endpoint e, bool include_usage) {
  ResponseContext c;
  c.id = "id-1";
  c.model = kModel;
  c.created = 1700000000;
  c.endpoint = e;
  c.include_usage = include_usage;
  return c;
}

TEST(OpenAiResponse, ChatBodyHasMessageAndUsage) {
  CompletionBody body(context(Endpoint::kChat, false));
  body.add(message("Hel", {1}));
  body.add(message("lo", {2}, baton::v1::FINISH_REASON_LENGTH));
  const json b = body.body();
  EXPECT_EQ(b["object"], "chat.completion");
  EXPECT_EQ(b["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(b["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(b["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(b["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(b["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(b["usage"]["completion_tokens"], 2);
  EXPECT_EQ(b["usage"]["total_tokens"], 6);
  EXPECT_EQ(b["usage"]["speculation"]["num_drafts"], 2);
}

TEST(OpenAiResponse, ChatStreamRoleFirstFinishThenUsage) {
  CompletionChunks chunks(context(Endpoint::kChat, true));
  std::vector<json> all;
  for (const auto& m : {message("a", {1}), message("b", {2}, baton::v1::FINISH_REASON_STOP)}) {
    for (json& c : chunks.on_message(m)) all.push_back(std::move(c));
  }
  ASSERT_EQ(all.size(), 5u);  // role, "a", "b", finish, usage
  for (const json& c : all) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], "id-1");
    EXPECT_TRUE(c.contains("usage"));
  }
  EXPECT_EQ(all[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(all[1]["choices"][0]["delta"]["content"], "a");
  EXPECT_TRUE(all[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(all[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(all[3]["usage"].is_null());
  EXPECT_TRUE(all[4]["choices"].empty());
  EXPECT_EQ(all[4]["usage"]["total_tokens"], 6);
}

TEST(OpenAiResponse, CompletionStreamWithoutUsage) {
  CompletionChunks chunks(context(Endpoint::kCompletions, false));
  std::vector<json> all = chunks.on_message(message("x", {1}, baton::v1::FINISH_REASON_LENGTH));
  ASSERT_EQ(all.size(), 2u);  // "x", finish
  EXPECT_EQ(all[0]["object"], "text_completion");
  EXPECT_EQ(all[0]["choices"][0]["text"], "x");
  EXPECT_EQ(all[1]["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(all[1].contains("usage"));
}

// extract_hidden_states' file, as vLLM reports it: kv_transfer_params in the choice, and at the top
// level of a one-choice response or stream.
TEST(OpenAiResponse, KvTransferParamsNameTheHiddenStatesFile) {
  baton::v1::GenerateResponse last = message("b", {2}, baton::v1::FINISH_REASON_LENGTH);
  last.mutable_kv_transfer_params()->set_hidden_states_path("/data/hs/req-1.safetensors");
  CompletionBody body(context(Endpoint::kCompletions, false));
  body.add(message("a", {1}));
  body.add(last);
  const json b = body.body();
  EXPECT_EQ(b["kv_transfer_params"]["hidden_states_path"], "/data/hs/req-1.safetensors");
  EXPECT_EQ(b["choices"][0]["kv_transfer_params"]["hidden_states_path"], "/data/hs/req-1.safetensors");
  // Two choices: each its own file, none at the top level.
  const json two = completion_body(context(Endpoint::kCompletions, false), json::array({body.choice(), body.choice()}),
                                   body.usage());
  EXPECT_FALSE(two.contains("kv_transfer_params"));
  EXPECT_TRUE(two["choices"][1].contains("kv_transfer_params"));
  // Without a file: no key at all.
  CompletionBody plain(context(Endpoint::kChat, false));
  plain.add(message("x", {1}, baton::v1::FINISH_REASON_STOP));
  EXPECT_FALSE(plain.body().contains("kv_transfer_params"));
  EXPECT_FALSE(plain.body()["choices"][0].contains("kv_transfer_params"));

  CompletionChunks chunks(context(Endpoint::kChat, true));
  std::vector<json> all = chunks.on_message(last);
  ASSERT_EQ(all.size(), 4u);  // role, "b", finish, usage
  EXPECT_FALSE(all[1].contains("kv_transfer_params"));
  EXPECT_EQ(all[2]["kv_transfer_params"]["hidden_states_path"], "/data/hs/req-1.safetensors");
  EXPECT_EQ(all[2]["choices"][0]["kv_transfer_params"]["hidden_states_path"], "/data/hs/req-1.safetensors");
}

TEST(OpenAiResponse, CompletionLogprobsInTheirShape) {
  ResponseContext c = context(Endpoint::kCompletions, false);
  c.want_logprobs = true;  // no tokenizer: tokens as "token_id:N"
  CompletionBody body(c);
  baton::v1::GenerateResponse m = message("ab", {7, 8}, baton::v1::FINISH_REASON_STOP);
  for (int id : {7, 8}) {
    auto* lp = m.add_logprobs();
    lp->set_token(id);
    lp->set_logprob(-0.5f);
    auto* top = lp->add_top();
    top->set_token(9);
    top->set_logprob(-1.0f);
  }
  body.add(m);
  const json lp = body.body()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"token_id:7", "token_id:8"}));
  EXPECT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][0]["token_id:9"], -1.0);
  EXPECT_EQ(lp["text_offset"], json({0, 10}));
}

}  // namespace
}  // namespace baton::router::http
