// Tool calling end to end: the real `baton up --http-port 0 --tool-call-parser hermes
// --enable-auto-tool-choice` (the bundled target, EAGLE-3 drafting, KV over UCX) answering the
// official `openai` npm client's chats with tools. A named tool_choice and "required" force the
// calls by structured decoding: their arguments validate against the tools' schemas (python3-
// jsonschema), the client's own stream accumulator rebuilds the same calls from the deltas, and
// greedy calls are the same with speculation off. "auto" reads calls from free text, which must
// then be the text the same chat gets without tools being read ("none").
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "tests/http/http_support.h"

namespace baton::testing {
namespace {

// The tools offered; short strings and enums keep the tiny model's calls short.
const json kTools = json::parse(R"([
  {"type":"function","function":{"name":"get_weather","description":"The weather in a city.",
   "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":16},
     "unit":{"enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}}},
  {"type":"function","function":{"name":"add","description":"Adds two small numbers.",
   "parameters":{"type":"object","properties":{"a":{"type":"integer","enum":[1,2,3]},
     "b":{"type":"integer","enum":[4,5,6]}},"required":["a","b"],"additionalProperties":false}}}])");

const json& schema_of(const std::string& name) {
  for (const json& t : kTools) {
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  }
  static const json none;
  ADD_FAILURE() << "no tool named " << name;
  return none;
}

// Every call's arguments against its tool's schema, by the reference validator.
void expect_valid_arguments(const json& calls) {
  const std::filesystem::path instances = temp_path("baton-tool-arguments.jsonl");
  {
    std::ofstream out(instances);
    for (const json& call : calls) out << json{{"schema", schema_of(call["function"]["name"])},
                                               {"text", call["function"]["arguments"]}}.dump() << "\n";
  }
  const ProcessOutput validated =
      run_program({"/usr/bin/python3", source_path("tests/engine/structured/validate_instances.py"), instances.string()});
  std::filesystem::remove(instances);
  EXPECT_EQ(validated.code, 0) << validated.out;
}

// Names and arguments, without the ids (new ones each answer).
json functions_of(const json& calls) {
  json out = json::array();
  for (const json& call : calls) out.push_back(call["function"]);
  return out;
}

TEST(HttpToolCalls, TheOpenAiClientGetsForcedAndParsedCalls) {
  BundledUp up = start_bundled_up("baton-http-tools-up", BATON_BINARY_DIR,
                                  {"--tool-call-parser", "hermes", "--enable-auto-tool-choice"});
  ASSERT_FALSE(up.base.empty());
  const std::string& base = up.base;

  const json ask = json::parse(R"([{"role":"user","content":"What is the weather in Paris? Then add 2 and 5."}])");
  const json named_choice = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const auto params = [&](const json& choice, const json& sampling) {
    json p = {{"model", "target"}, {"messages", ask}, {"tools", kTools}, {"tool_choice", choice}, {"max_tokens", 200}};
    p.update(sampling);
    return p;
  };
  const json greedy = {{"temperature", 0}};
  const json sampled = {{"temperature", 0.8}, {"seed", 11}};
  const json cases = json::array({
      {{"kind", "chat"}, {"stream", false}, {"params", params(named_choice, greedy)}},
      {{"kind", "chat"}, {"stream", true}, {"helper", true}, {"params", params(named_choice, greedy)}},
      {{"kind", "chat"}, {"stream", false}, {"params", params(named_choice, sampled)}},
      {{"kind", "chat"}, {"stream", false}, {"params", params("required", greedy)}},
      {{"kind", "chat"}, {"stream", true}, {"helper", true}, {"params", params("required", greedy)}},
      {{"kind", "chat"}, {"stream", false}, {"params", params("required", sampled)}},
      {{"kind", "chat"}, {"stream", false}, {"params", params("auto", greedy)}},
      {{"kind", "chat"}, {"stream", true}, {"helper", true}, {"params", params("auto", greedy)}},
      {{"kind", "chat"}, {"stream", false}, {"params", params("none", greedy)}},
  });
  const json r = openai_client(base, "no-key", cases);
  ASSERT_EQ(r.size(), cases.size()) << r.dump();
  for (const json& answer : r) ASSERT_FALSE(answer.contains("error")) << answer.dump();

  // A named function: exactly one call of it, finish_reason "stop" (as OpenAI), no content.
  for (int i : {0, 1, 2}) {
    SCOPED_TRACE(cases[i].dump());
    ASSERT_TRUE(r[i]["tool_calls"].is_array()) << r[i].dump();
    ASSERT_EQ(r[i]["tool_calls"].size(), 1u) << r[i].dump();
    EXPECT_EQ(r[i]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_TRUE(r[i]["tool_calls"][0]["id"].get<std::string>().starts_with("call_"));
    EXPECT_EQ(r[i]["finish_reason"], "stop");
    EXPECT_TRUE(r[i]["text"].is_null()) << r[i].dump();
    expect_valid_arguments(r[i]["tool_calls"]);
  }
  // "required": one call or more, each a tool's, finish_reason "tool_calls".
  for (int i : {3, 4, 5}) {
    SCOPED_TRACE(cases[i].dump());
    ASSERT_TRUE(r[i]["tool_calls"].is_array()) << r[i].dump();
    ASSERT_GE(r[i]["tool_calls"].size(), 1u);
    EXPECT_EQ(r[i]["finish_reason"], "tool_calls");
    expect_valid_arguments(r[i]["tool_calls"]);
  }
  EXPECT_EQ(functions_of(r[1]["tool_calls"]), functions_of(r[0]["tool_calls"])) << "streamed and not";
  EXPECT_EQ(functions_of(r[4]["tool_calls"]), functions_of(r[3]["tool_calls"])) << "streamed and not";

  // Lossless: the greedy calls with speculation off (max_speculative_tokens 0, over curl).
  for (int i : {0, 3}) {
    json plain = cases[i]["params"];
    plain["max_speculative_tokens"] = 0;
    const HttpResult unspeculated = curl(base + "/chat/completions", plain.dump(), "");
    ASSERT_EQ(unspeculated.status, 200) << unspeculated.body;
    const json body = unspeculated.json_body();
    EXPECT_EQ(body["usage"]["speculation"]["num_drafts"], 0);
    EXPECT_GT(r[i]["usage"]["speculation"]["num_drafts"].get<int>(), 0) << r[i].dump();
    EXPECT_EQ(functions_of(body["choices"][0]["message"]["tool_calls"]), functions_of(r[i]["tool_calls"]));
  }

  // "auto": the hermes parser reads the free answer. This model answers in text (no <tool_call>
  // block), so the answer is the same text as with tool_choice "none", streamed or not.
  for (int i : {6, 7}) {
    SCOPED_TRACE(cases[i].dump());
    EXPECT_EQ(r[i]["text"], r[8]["text"]);
    EXPECT_EQ(r[i]["finish_reason"], r[8]["finish_reason"]);
    EXPECT_TRUE(r[i]["tool_calls"].is_null() || r[i]["tool_calls"].empty()) << r[i].dump();
  }
  ASSERT_TRUE(r[8]["text"].is_string());
  EXPECT_EQ(r[8]["text"].get<std::string>().find("<tool_call>"), std::string::npos);

  // The next turn: the assistant's calls and the tool's answers in the history.
  json history = ask;
  history.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}});
  history.back()["tool_calls"].push_back({{"id", r[0]["tool_calls"][0]["id"]}, {"type", "function"},
                                          {"function", r[0]["tool_calls"][0]["function"]}});
  history.push_back({{"role", "tool"}, {"tool_call_id", r[0]["tool_calls"][0]["id"]}, {"content", "18 degrees"}});
  json next = params("none", greedy);
  next["messages"] = history;
  const HttpResult answered = curl(base + "/chat/completions", next.dump(), "");
  ASSERT_EQ(answered.status, 200) << answered.body;
  EXPECT_TRUE(answered.json_body()["choices"][0]["message"]["content"].is_string());

  // Refused at the door, naming the field: a function not offered.
  json unknown = params({{"type", "function"}, {"function", {{"name", "get_time"}}}}, greedy);
  const HttpResult refused = curl(base + "/chat/completions", unknown.dump(), "");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.json_body()["error"]["param"], "tool_choice");
  EXPECT_EQ(up.process->terminate(std::chrono::seconds(30)), 0) << up.process->log_tail();
}

}  // namespace
}  // namespace baton::testing
