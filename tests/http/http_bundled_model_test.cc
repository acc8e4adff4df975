// The bundled model as a newcomer meets it: the real default `baton up --http-port 0` (the bundled
// target with its own chat template, EAGLE-3 drafting, KV over UCX) answering the official `openai`
// npm client's chat, prefix caching on a repeated prompt, and response_format with a JSON schema.
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "tests/http/http_support.h"

namespace baton::testing {
namespace {

// The newcomer's first chat: the default `baton up --http-port 0` (the bundled target with its own
// chat template, EAGLE-3 drafting, KV over UCX) answers the official `openai` client's chat,
// streamed and not, with local generation's text, which is Python (it compiles) that ends where the
// model ends its turn; a repeated prompt is served from the prefix cache with the same text; and a
// JSON-schema response_format gives JSON that validates.
TEST(HttpBundledModel, TheDefaultClusterChatsInPythonWithTheOpenAiClient) {
  BundledUp up = start_bundled_up("baton-http-bundled-up", BATON_BINARY_DIR);
  ASSERT_FALSE(up.base.empty());
  const std::string& base = up.base;
  const std::string model = source_path("models/baton-tiny-code/target");
  const std::string messages = R"([{"role":"user","content":"Return the n-th Fibonacci number."}])";
  const json expected = baton_generate(model, {"--chat", messages, "--max-tokens", "128", "--temperature", "0"});
  ASSERT_EQ(expected["finish_reason"], "stop") << expected.dump();
  json cases = json::array();
  for (bool stream : {false, true, false}) {
    cases.push_back({{"kind", "chat"}, {"stream", stream},
                     {"params", {{"model", "target"}, {"messages", json::parse(messages)}, {"max_tokens", 128},
                                 {"temperature", 0}}}});
  }
  const json results = openai_client(base, "no-key-needed", cases);
  ASSERT_EQ(results.size(), cases.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(cases[i].dump());
    ASSERT_FALSE(results[i].contains("error")) << results[i].dump();
    EXPECT_EQ(results[i]["text"], expected["text"]);
    EXPECT_EQ(results[i]["finish_reason"], "stop");
  }
  EXPECT_EQ(results[2]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0, true) << results[2].dump();
  // Python code: the reply compiles.
  const std::filesystem::path reply = temp_path("baton-chat-reply.py");
  std::ofstream(reply) << expected["text"].get<std::string>();
  const ProcessOutput compiled =
      run_program({"/usr/bin/python3", "-c", "import sys; compile(open(sys.argv[1]).read(), 'reply', 'exec')",
                   reply.string()});
  std::filesystem::remove(reply);
  EXPECT_EQ(compiled.code, 0) << expected["text"] << "\n" << compiled.out;

  // response_format: a JSON schema through the official client, greedy and seeded sampled, with
  // EAGLE-3 drafting; each answer is JSON the reference validator accepts, and the greedy one is
  // the answer with speculation off (max_speculative_tokens 0, over curl).
  const json schema = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":24},
      "arguments":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":3},
      "returns":{"enum":["int","str","list","None"]}},"required":["name","arguments","returns"],
      "additionalProperties":false})");
  const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "function"}, {"schema", schema}}}};
  const json ask = json::parse(R"([{"role":"user","content":"Describe a function that adds two numbers."}])");
  json structured = json::array();
  for (const json& sampling : {json{{"temperature", 0}}, json{{"temperature", 0.8}, {"seed", 3}}}) {
    json params = {{"model", "target"}, {"messages", ask}, {"max_tokens", 400}, {"response_format", format}};
    params.update(sampling);
    structured.push_back({{"kind", "chat"}, {"stream", false}, {"params", params}});
  }
  structured.push_back({{"kind", "chat"}, {"stream", true}, {"params", structured[0]["params"]}});
  const json answers = openai_client(base, "no-key-needed", structured);
  ASSERT_EQ(answers.size(), structured.size());
  const std::filesystem::path instances = temp_path("baton-structured-answers.jsonl");
  {
    std::ofstream out(instances);
    for (const json& a : answers) {
      ASSERT_FALSE(a.contains("error")) << a.dump();
      EXPECT_EQ(a["finish_reason"], "stop") << a.dump();
      out << json{{"schema", schema}, {"text", a["text"]}}.dump() << "\n";
    }
  }
  const ProcessOutput validated = run_program({"/usr/bin/python3", source_path("tests/engine/structured/validate_instances.py"),
                                               instances.string()});
  std::filesystem::remove(instances);
  EXPECT_EQ(validated.code, 0) << validated.out;
  EXPECT_EQ(answers[2]["text"], answers[0]["text"]) << "streamed and not";
  json plain = structured[0]["params"];
  plain["max_speculative_tokens"] = 0;
  const HttpResult unspeculated = curl(base + "/chat/completions", plain.dump(), "");
  ASSERT_EQ(unspeculated.status, 200) << unspeculated.body;
  EXPECT_EQ(unspeculated.json_body()["choices"][0]["message"]["content"], answers[0]["text"]);
  EXPECT_EQ(unspeculated.json_body()["usage"]["speculation"]["num_drafts"], 0);
  EXPECT_EQ(up.process->terminate(std::chrono::seconds(30)), 0) << up.process->log_tail();
}

}  // namespace
}  // namespace baton::testing
