// A hybrid model (the Qwen3-Next fixture: Gated DeltaNet layers with a recurrent state) served end
// to end by the real `baton up` with n-gram drafting — a prefill node handing the KV and the
// recurrent state over UCX to a decode node (both at the decode k, the P/D rule's hybrid branch),
// and `--prefill 0` (the decode node prefills locally) — answers OpenAI completions, streamed and
// not, with exactly `baton generate`'s greedy text, and its decode node's /metrics counts its
// recurrent state groups, all free again at the end.
#include <gtest/gtest.h>

#include <regex>

#include "tests/engine/fixtures.h"
#include "tests/http/http_support.h"

namespace baton::testing {
namespace {

class HttpHybrid : public ::testing::TestWithParam<int> {};  // the number of prefill nodes

TEST_P(HttpHybrid, TheClusterServesAHybridWithTheLocalTokens) {
  const std::string model = fixture_path("qwen3-next-f32");
  BundledUp up = start_bundled_up(
      "baton-http-hybrid-up-" + std::to_string(GetParam()), BATON_BINARY_DIR,
      {"--model", model, "--prefill", std::to_string(GetParam()), "--speculative-config",
       R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})", "--metrics"});
  ASSERT_FALSE(up.base.empty());
  // "baton up: decode HOST:PORT metrics on http://HOST:PORT/metrics"
  auto metrics_line = up.process->wait_for_line("baton up: decode ", std::chrono::seconds(30));
  ASSERT_TRUE(metrics_line.ok()) << metrics_line.status();
  const std::size_t at = metrics_line->find("metrics on ") + 11;
  const std::string metrics_url = metrics_line->substr(at, metrics_line->find_first_of(" \n", at) - at);
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
  // The decode node reports its recurrent state groups beside its KV blocks: all free again.
  const HttpResult scrape = curl(metrics_url, "", "", /*post=*/false);
  ASSERT_EQ(scrape.status, 200);
  // (Labels after state, such as model_name, may follow.)
  EXPECT_TRUE(std::regex_search(scrape.body, std::regex(R"(pool="state",state="free"[^}]*\} 64\n)"))) << scrape.body.substr(0, 3000);
  EXPECT_TRUE(std::regex_search(scrape.body, std::regex(R"(pool="state",state="used"[^}]*\} 0\n)")));
}

INSTANTIATE_TEST_SUITE_P(PrefillNodes, HttpHybrid, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param) + "_prefill"; });

}  // namespace
}  // namespace baton::testing
