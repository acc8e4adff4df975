// Tool calling without a server: the chat request's tools / tool_choice / history (openai_tools.h),
// the output parsers (tool_call_parser.h: the same content and calls however the text is split),
// and the answers in OpenAI's shape, whole and streamed (openai_response.h).
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/json_grammar.h"
#include "router/http/openai_request.h"
#include "router/http/openai_response.h"
#include "router/http/tool_call_parser.h"

namespace baton::router::http {
namespace {

using nlohmann::json;

constexpr const char* kModel = "tiny";

// Written with "location" before "days": the order a schema and its generation keep.
const std::string kTools = R"([{"type":"function","function":{"name":"get_weather","description":"Weather.",
  "parameters":{"type":"object","properties":{"location":{"type":"string"},"days":{"type":"integer"}},
  "required":["location","days"]}}},{"type":"function","function":{"name":"now"}}])";

std::string chat_body(const std::string& extra) {
  return R"({"model":"tiny","messages":[{"role":"user","content":"Weather?"}],"tools":)" + kTools + extra + "}";
}

std::variant<OpenAiRequest, ApiError> parse(const std::string& body, bool auto_tool_choice = false) {
  return parse_request(Endpoint::kChat, body, kModel, auto_tool_choice);
}

OpenAiRequest ok(const std::string& body, bool auto_tool_choice = false) {
  auto r = parse(body, auto_tool_choice);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->param << ": " << e->message;
  return std::holds_alternative<OpenAiRequest>(r) ? std::get<OpenAiRequest>(r) : OpenAiRequest{};
}

TEST(OpenAiTools, ToolsReachTheChatInTheOrderWritten) {
  const OpenAiRequest r = ok(chat_body(R"(,"tool_choice":"none")"));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNone);
  const auto& chat = r.generate.chat();
  ASSERT_EQ(chat.tools_size(), 2);
  EXPECT_EQ(chat.tools(0).name(), "get_weather");
  EXPECT_EQ(chat.tools(0).description(), "Weather.");
  EXPECT_LT(chat.tools(0).parameters().find("location"), chat.tools(0).parameters().find("days"));
  EXPECT_FALSE(chat.tools(1).has_description());
  EXPECT_TRUE(chat.tools(1).parameters().empty());
  EXPECT_TRUE(r.generate.sampling().response_format().empty());
}

TEST(OpenAiTools, AutoNeedsTheServersParser) {
  auto refused = parse(chat_body(""));  // tools without tool_choice: "auto"
  ASSERT_TRUE(std::holds_alternative<ApiError>(refused));
  EXPECT_EQ(std::get<ApiError>(refused).param, "tool_choice");
  EXPECT_NE(std::get<ApiError>(refused).message.find("--enable-auto-tool-choice"), std::string::npos);
  const OpenAiRequest r = ok(chat_body(""), /*auto_tool_choice=*/true);
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.generate.sampling().response_format().empty());  // the model is free to answer
}

// "required" and a named function become response_format schemas that the router's structured
// decoding compiles, and whose values are exactly the calls the parsers read back.
TEST(OpenAiTools, ForcedChoicesConstrainDecoding) {
  const OpenAiRequest named = ok(chat_body(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(named.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.tools.name, "get_weather");
  const json format = json::parse(named.generate.sampling().response_format());
  EXPECT_EQ(format["json_schema"]["schema"]["required"], json({"location", "days"}));
  EXPECT_LT(named.generate.sampling().response_format().find("location"),
            named.generate.sampling().response_format().find("days"));
  EXPECT_TRUE(structured::response_format_grammar(named.generate.sampling().response_format()).ok());

  const OpenAiRequest required = ok(chat_body(R"(,"tool_choice":"required","parallel_tool_calls":false)"));
  EXPECT_EQ(required.tools.choice, ToolChoice::kRequired);
  EXPECT_FALSE(required.tools.parallel);
  const json calls = json::parse(required.generate.sampling().response_format())["json_schema"]["schema"];
  EXPECT_EQ(calls["type"], "array");
  EXPECT_EQ(calls["minItems"], 1);
  EXPECT_EQ(calls["maxItems"], 1);
  ASSERT_EQ(calls["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(calls["items"]["anyOf"][1]["properties"]["name"]["const"], "now");
  auto grammar = structured::response_format_grammar(required.generate.sampling().response_format());
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  for (const std::string text : {R"([{"name":"now","parameters":{}}])",
                                 R"([{"name":"get_weather","parameters":{"location":"Paris","days":2}}])"}) {
    structured::GrammarMatcher m(*grammar);
    EXPECT_TRUE(m.accept(text) && m.complete()) << text;
  }
  structured::GrammarMatcher wrong(*grammar);
  EXPECT_FALSE(wrong.accept(R"([{"name":"get_time")")) << "only the tools' names";
}

TEST(OpenAiTools, HistoryCallsAndToolMessages) {
  const OpenAiRequest r = ok(R"({"model":"tiny","tool_choice":"none","tools":)" + kTools + R"(,"messages":[
    {"role":"user","content":"Weather?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"location\":\"Paris\",\"days\":2}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"sunny"}]})");
  const auto& m = r.generate.chat().messages();
  ASSERT_EQ(m.size(), 3);
  EXPECT_FALSE(m[1].has_content());  // None in the template
  ASSERT_EQ(m[1].tool_calls_size(), 1);
  EXPECT_EQ(m[1].tool_calls(0).id(), "call_1");
  EXPECT_EQ(m[1].tool_calls(0).name(), "get_weather");
  EXPECT_EQ(m[1].tool_calls(0).arguments(), R"({"location":"Paris","days":2})");
  EXPECT_EQ(m[2].role(), "tool");
  EXPECT_EQ(m[2].tool_call_id(), "call_1");
  EXPECT_EQ(m[2].content(), "sunny");
}

TEST(OpenAiTools, EveryRejectionNamesItsField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {chat_body(R"(,"tool_choice":"sometimes")"), "tool_choice"},
      {chat_body(R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})"), "tool_choice"},
      {chat_body(R"(,"tool_choice":{"type":"function"})"), "tool_choice"},
      {chat_body(R"(,"tool_choice":"required","response_format":{"type":"json_object"})"), "response_format"},
      {chat_body(R"(,"tool_choice":"none","parallel_tool_calls":"yes")"), "parallel_tool_calls"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", "tool_choice"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"none","tools":{}})", "tools"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"none",
          "tools":[{"type":"retrieval"}]})", "tools[0].type"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"none",
          "tools":[{"type":"function","function":{"name":"a b"}}]})", "tools[0].function.name"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"none",
          "tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]})",
       "tools[1].function.name"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"none",
          "tools":[{"type":"function","function":{"name":"f","parameters":[]}}]})", "tools[0].function.parameters"},
      // A schema decoding cannot enforce cannot be forced; offered under "none" it is fine.
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"required",
          "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",
          "properties":{"id":{"type":"string","pattern":"^a"}}}}}]})", "tools[0].function.parameters"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[
          {"id":"c","type":"function","function":{"name":"f","arguments":"not json"}}]}]})",
       "messages[1].tool_calls[0].function.arguments"},
      {R"({"model":"tiny","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[
          {"id":"c","type":"function","function":{"name":"f","arguments":{"a":1}}}]}]})",
       "messages[1].tool_calls[0].function.arguments"},
      {R"({"model":"tiny","messages":[{"role":"tool","tool_call_id":7,"content":"x"}]})", "messages[0].tool_call_id"},
  };
  for (const auto& [body, param] : cases) {
    SCOPED_TRACE(body);
    auto r = parse(body, /*auto_tool_choice=*/true);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r));
    EXPECT_EQ(std::get<ApiError>(r).status, 400);
    EXPECT_EQ(std::get<ApiError>(r).param, param) << std::get<ApiError>(r).message;
  }
  // Offered but not forced, an unenforceable schema is only shown to the model.
  EXPECT_EQ(ok(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"none",
      "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"id":{"type":"string","pattern":"^a"}}}}}]})").generate.chat().tools_size(), 1);
  auto completions = parse_request(Endpoint::kCompletions,
                                   R"({"model":"tiny","prompt":"x","tools":)" + kTools + "}", kModel, true);
  ASSERT_TRUE(std::holds_alternative<ApiError>(completions));
  EXPECT_EQ(std::get<ApiError>(completions).param, "tools");
}

// What a parser says for `text` fed in the given pieces: content, and each call's name and
// arguments joined.
struct Said {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;
  bool operator==(const Said&) const = default;
};

Said said(ToolCallParser& parser, const std::vector<std::string>& pieces) {
  Said s;
  auto take = [&](ParsedText p) {
    s.content += p.content;
    for (const ToolCallPart& part : p.calls) {
      if (part.index == s.calls.size()) s.calls.emplace_back(part.name, "");
      ASSERT_LT(part.index, s.calls.size());
      if (!part.name.empty()) {
        EXPECT_EQ(part.name, s.calls[part.index].first);
      }
      s.calls[part.index].second += part.arguments;
    }
  };
  for (const std::string& piece : pieces) take(parser.feed(piece));
  take(parser.finish());
  return s;
}

// Every split of `text` into two pieces, and byte by byte, says what the whole text says.
template <typename Make>
Said said_however_split(Make make, const std::string& text) {
  auto whole = make();
  const Said expected = said(*whole, {text});
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    auto p = make();
    EXPECT_EQ(said(*p, {text.substr(0, cut), text.substr(cut)}), expected) << "cut at " << cut << ": " << text;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  auto p = make();
  EXPECT_EQ(said(*p, bytes), expected) << "byte by byte: " << text;
  return expected;
}

TEST(ToolCallParser, HermesBlocks) {
  auto hermes = [] { return make_tool_call_parser(ToolCallFormat::kHermes); };
  Said s = said_however_split(hermes, "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                      "{\"location\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n"
                                      "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n");
  EXPECT_EQ(s.content, "Let me look.\n");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0], std::make_pair(std::string("get_weather"), std::string(R"({"location":"Paris","days":2})")));
  EXPECT_EQ(s.calls[1], std::make_pair(std::string("now"), std::string("{}")));

  s = said_however_split(hermes, "No tools needed: 1 < 2 and <tool is a word.");
  EXPECT_EQ(s.content, "No tools needed: 1 < 2 and <tool is a word.");
  EXPECT_TRUE(s.calls.empty());

  // A block that is not a call stays content, as written; text after a call is content.
  s = said_however_split(hermes, "<tool_call>{\"nom\": 1}</tool_call> then <tool_call>{\"name\":\"now\"}</tool_call>ok");
  EXPECT_EQ(s.content, "<tool_call>{\"nom\": 1}</tool_call> then ok");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].second, "{}");

  // The output ended inside a block (max_tokens, or a stop string): a complete call is kept.
  s = said_however_split(hermes, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n");
  ASSERT_EQ(s.calls.size(), 1u);
  s = said_however_split(hermes, "<tool_call>\n{\"name\": \"now\", \"argu");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "<tool_call>\n{\"name\": \"now\", \"argu");
}

TEST(ToolCallParser, Llama3Json) {
  auto llama = [] { return make_tool_call_parser(ToolCallFormat::kLlama3Json); };
  Said s = said_however_split(llama, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": "
                                     "\"Paris;\\\"}\", \"days\": 2}}; {\"name\": \"now\", \"parameters\": {}}");
  EXPECT_TRUE(s.content.empty());
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].second, R"({"location":"Paris;\"}","days":2})");
  EXPECT_EQ(s.calls[1].first, "now");
  s = said_however_split(llama, "  It is sunny {really}.");
  EXPECT_EQ(s.content, "  It is sunny {really}.");
  s = said_however_split(llama, "{\"name\": \"now\", \"parameters\": {}} and more");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "{\"name\": \"now\", \"parameters\": {}} and more");
}

TEST(ToolCallParser, ForcedChoices) {
  // The blanks the JSON grammar allows around the arguments are not part of them.
  Said s = said_however_split([] { return make_named_call_parser("get_weather"); },
                              " {\"location\" : \"Paris\",\n \"days\":2}\n");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0], std::make_pair(std::string("get_weather"), std::string("{\"location\" : \"Paris\",\n \"days\":2}")));
  s = said_however_split(make_required_calls_parser,
                         R"([{"name":"get_weather","parameters":{"location":"Oslo","days":1}},{"name":"now","parameters":{}}])");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].second, R"({"location":"Oslo","days":1})");
  s = said_however_split(make_required_calls_parser, R"([{"name":"get_weather","parameters":{"loc)");
  EXPECT_TRUE(s.calls.empty());  // cut off by max_tokens: the text, as content
  EXPECT_EQ(s.content, R"([{"name":"get_weather","parameters":{"loc)");
}

baton::v1::GenerateResponse message(const std::string& text, baton::v1::FinishReason finish) {
  baton::v1::GenerateResponse m;
  m.set_text(text);
  m.add_token_ids(1);
  m.set_finish_reason(finish);
  return m;
}

ResponseContext tool_context(ToolChoice choice, bool parallel = true) {
  ResponseContext c;
  c.id = "chatcmpl-1";
  c.model = kModel;
  c.endpoint = Endpoint::kChat;
  c.tools.choice = choice;
  c.tools.name = "get_weather";
  c.tools.parallel = parallel;
  c.tool_parser = ToolCallFormat::kHermes;
  return c;
}

// The body's message, and the message a client rebuilds from the stream's deltas, are the same.
TEST(OpenAiResponse, ToolCallsWholeAndStreamed) {
  const std::vector<std::string> pieces = {"Checking.\n<tool", "_call>\n{\"name\": \"get_weather\", \"argu",
                                           "ments\": {\"location\": \"Rome\", \"days\": 3}}\n</tool_call>\n",
                                           "<tool_call>{\"name\": \"now\"}</tool_call>"};
  for (bool parallel : {true, false}) {
    SCOPED_TRACE(parallel);
    CompletionBody body(tool_context(ToolChoice::kAuto, parallel));
    CompletionChunks chunks(tool_context(ToolChoice::kAuto, parallel));
    json rebuilt = {{"content", ""}, {"tool_calls", json::array()}};
    std::string finish;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const auto m = message(pieces[i], i + 1 == pieces.size() ? baton::v1::FINISH_REASON_STOP
                                                               : baton::v1::FINISH_REASON_UNSPECIFIED);
      body.add(m);
      for (const json& chunk : chunks.on_message(m)) {
        if (chunk["choices"].empty()) continue;
        const json& choice = chunk["choices"][0];
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
        const json& delta = choice["delta"];
        if (delta.contains("content")) rebuilt["content"] = rebuilt["content"].get<std::string>() + delta["content"].get<std::string>();
        for (const json& call : delta.value("tool_calls", json::array())) {
          const std::size_t index = call["index"];
          if (index == rebuilt["tool_calls"].size()) {
            ASSERT_TRUE(call.contains("id"));
            EXPECT_EQ(call["type"], "function");
            rebuilt["tool_calls"].push_back({{"id", call["id"]}, {"type", "function"},
                                             {"function", {{"name", call["function"]["name"]}, {"arguments", ""}}}});
          }
          auto& args = rebuilt["tool_calls"][index]["function"]["arguments"];
          args = args.get<std::string>() + call["function"]["arguments"].get<std::string>();
        }
      }
    }
    const json whole = body.choice();
    EXPECT_EQ(whole["finish_reason"], "tool_calls");
    EXPECT_EQ(finish, "tool_calls");
    const json& message = whole["message"];
    EXPECT_EQ(message["content"], "Checking.\n");
    EXPECT_EQ(rebuilt["content"], message["content"]);
    ASSERT_EQ(message["tool_calls"].size(), parallel ? 2u : 1u);
    ASSERT_EQ(rebuilt["tool_calls"].size(), message["tool_calls"].size());
    for (std::size_t i = 0; i < message["tool_calls"].size(); ++i) {
      EXPECT_EQ(rebuilt["tool_calls"][i]["function"], message["tool_calls"][i]["function"]);
      EXPECT_TRUE(message["tool_calls"][i]["id"].get<std::string>().starts_with("call_"));
    }
    EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"location":"Rome","days":3})");
  }
}

TEST(OpenAiResponse, NamedChoiceStreamsItsArgumentsAndStops) {
  CompletionChunks chunks(tool_context(ToolChoice::kNamed));
  std::vector<json> all;
  for (const auto& m : {message("{\"location\":", baton::v1::FINISH_REASON_UNSPECIFIED),
                        message("\"Rome\",\"days\":1}", baton::v1::FINISH_REASON_STOP)}) {
    for (json& c : chunks.on_message(m)) all.push_back(std::move(c));
  }
  ASSERT_EQ(all.size(), 4u);  // role, first part (id, name), more arguments, finish
  EXPECT_EQ(all[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(all[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"location\":");
  EXPECT_FALSE(all[2]["choices"][0]["delta"]["tool_calls"][0].contains("id"));
  EXPECT_EQ(all[3]["choices"][0]["finish_reason"], "stop");  // OpenAI's for a named function
  CompletionBody body(tool_context(ToolChoice::kNamed));
  body.add(message("{}", baton::v1::FINISH_REASON_STOP));
  EXPECT_TRUE(body.choice()["message"]["content"].is_null());
  EXPECT_EQ(body.choice()["message"]["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST(OpenAiResponse, NoCallIsPlainContent) {
  CompletionBody body(tool_context(ToolChoice::kAuto));
  body.add(message("Just text.", baton::v1::FINISH_REASON_STOP));
  const json c = body.choice();
  EXPECT_EQ(c["message"]["content"], "Just text.");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
  EXPECT_EQ(c["finish_reason"], "stop");
}

}  // namespace
}  // namespace baton::router::http
