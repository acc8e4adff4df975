// A hybrid model (the Qwen3-Next fixture: Gated DeltaNet layers with a recurrent state) served end
// to end: the real `baton up --prefill 0` (decode nodes prefill locally, since no KV transport
// moves the recurrent state yet) with n-gram drafting answers OpenAI completions, streamed and
// not, with exactly `baton generate`'s greedy text, and its decode nodes refuse reservations.
#include <gtest/gtest.h>

#include "tests/engine/fixtures.h"
#include "tests/http/http_support.h"

namespace baton::testing {
namespace {

TEST(HttpHybrid, DecodeNodesServeAHybridWithTheLocalTokens) {
  const std::string model = fixture_path("qwen3-next-f32");
  BundledUp up = start_bundled_up(
      "baton-http-hybrid-up", BATON_BINARY_DIR,
      {"--model", model, "--prefill", "0", "--speculative-config",
       R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})"});
  ASSERT_FALSE(up.base.empty());
  for (const std::string prompt : {"def add(a, b):", "hello hello hello"}) {
    const json expected = baton_generate(model, {"--prompt", prompt, "--max-tokens", "24", "--temperature", "0"});
    ASSERT_TRUE(expected["text"].is_string() && !expected["text"].get<std::string>().empty()) << expected.dump();
    const json body = {{"model", "qwen3-next-f32"}, {"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}};
    const HttpResult whole = curl(up.base + "/completions", body.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    EXPECT_EQ(whole.json_body()["choices"][0]["text"], expected["text"]) << prompt;
    EXPECT_EQ(whole.json_body()["usage"]["completion_tokens"], expected["generated_tokens"]) << prompt;
    json streamed = body;
    streamed["stream"] = true;
    const HttpResult stream = curl(up.base + "/completions", streamed.dump());
    ASSERT_EQ(stream.status, 200) << stream.body;
    std::string text;
    for (const std::string& event : sse_events(stream.body)) {
      if (event == "[DONE]") break;
      const json e = json::parse(event);
      if (!e["choices"].empty()) text += e["choices"][0].value("text", "");
    }
    EXPECT_EQ(text, expected["text"]) << prompt << " (streamed)";
  }
}

}  // namespace
}  // namespace baton::testing
