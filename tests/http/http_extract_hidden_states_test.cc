// extract_hidden_states served by the real `baton up --kv-transfer-config`: with a prefill node (the
// prompt's states are saved where it is prefilled, and the KV moves to the decode node over UCX) and
// with `--prefill 0` (the decode node prefills locally). The OpenAI response carries vLLM's
// kv_transfer_params.hidden_states_path (whole and streamed), `baton generate --endpoint` (gRPC) the
// same, the text is `baton generate`'s, and the file holds the same prompt and states as the file a
// local `baton generate` with the same flags writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/model/safetensors.h"
#include "tests/engine/fixtures.h"
#include "tests/http/http_support.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

struct Saved {
  std::vector<std::int64_t> token_ids;
  std::vector<std::int64_t> shape;
  std::vector<float> states;
};

Saved read_saved(const std::string& path) {
  Saved s;
  auto file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return s;
  for (const TensorInfo& t : file->tensors()) {
    if (t.name == "token_ids") {
      s.token_ids.resize(static_cast<std::size_t>(t.numel()));
      std::memcpy(s.token_ids.data(), t.data, t.bytes);
    } else if (t.name == "hidden_states") {
      s.shape = t.shape;
      s.states.resize(static_cast<std::size_t>(t.numel()));
      std::memcpy(s.states.data(), t.data, t.bytes);
    }
  }
  return s;
}

void expect_same_states(const std::string& got_path, const std::string& want_path) {
  const Saved got = read_saved(got_path);
  const Saved want = read_saved(want_path);
  EXPECT_EQ(got.token_ids, want.token_ids);
  ASSERT_EQ(got.shape, want.shape);
  ASSERT_EQ(got.states.size(), want.states.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.states.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(got.states[i] - want.states[i])));
  }
  EXPECT_LT(worst, 1e-5) << got_path << " vs " << want_path;
}

std::string kv_config(const fs::path& dir) {
  return json({{"kv_connector", "ExampleHiddenStatesConnector"},
               {"kv_role", "kv_producer"},
               {"kv_connector_extra_config", {{"shared_storage_path", dir.string()}}}})
      .dump();
}

class HttpExtractHiddenStates : public ::testing::TestWithParam<int> {};  // the number of prefill nodes

TEST_P(HttpExtractHiddenStates, ResponsesNameTheFileOfThePromptsStates) {
  const std::string model = fixture_path("llama-f32");
  const std::string spec =
      R"({"method":"extract_hidden_states","draft_model_config":{"hf_config":{"eagle_aux_hidden_state_layer_ids":[1,0]}}})";
  const std::string name = "baton-http-extract-" + std::to_string(GetParam());
  const fs::path served = scratch_path(name + "-files");
  BundledUp up = start_bundled_up(name, BATON_BINARY_DIR,
                                  {"--model", model, "--prefill", std::to_string(GetParam()), "--speculative-config", spec,
                                   "--kv-transfer-config", kv_config(served)});
  ASSERT_FALSE(up.base.empty());
  auto ready = up.process->wait_for_line("router ready on ", std::chrono::seconds(10));
  ASSERT_TRUE(ready.ok()) << ready.status();
  const std::size_t at = ready->find("router ready on ") + 16;
  const std::string router = ready->substr(at, ready->find(' ', at) - at);

  const std::string prompt = "def add(a, b):";
  const fs::path local = scratch_path(name + "-local");
  const json expected = baton_generate(model, {"--prompt", prompt, "--max-tokens", "8", "--temperature", "0",
                                               "--speculative-config", spec, "--kv-transfer-config", kv_config(local)});
  const std::string local_file = expected["kv_transfer_params"]["hidden_states_path"];
  ASSERT_TRUE(fs::exists(local_file));

  const json body = {{"model", "llama-f32"}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
  const HttpResult whole = curl(up.base + "/completions", body.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json b = whole.json_body();
  EXPECT_EQ(b["choices"][0]["text"], expected["text"]);
  const std::string path = b["kv_transfer_params"]["hidden_states_path"];
  EXPECT_EQ(b["choices"][0]["kv_transfer_params"]["hidden_states_path"], path);
  EXPECT_EQ(fs::path(path).parent_path(), fs::absolute(served).lexically_normal());
  expect_same_states(path, local_file);

  json streamed = body;
  streamed["stream"] = true;
  const HttpResult stream = curl(up.base + "/completions", streamed.dump());
  ASSERT_EQ(stream.status, 200) << stream.body;
  std::string stream_path;
  for (const std::string& event : sse_events(stream.body)) {
    if (event == "[DONE]") break;
    const json e = json::parse(event);
    if (e.contains("kv_transfer_params")) stream_path = e["kv_transfer_params"]["hidden_states_path"];
  }
  ASSERT_FALSE(stream_path.empty()) << stream.body;
  EXPECT_NE(stream_path, path);  // each request its own file
  expect_same_states(stream_path, local_file);

  // gRPC, through `baton generate --endpoint`.
  const ProcessOutput remote = run_program({BATON_CLI_PATH, "generate", "--endpoint", router, "--prompt", prompt,
                                            "--max-tokens", "8", "--temperature", "0", "--json", "--log-level", "error"});
  ASSERT_EQ(remote.code, 0) << remote.out;
  const std::size_t brace = remote.out.find('{');
  ASSERT_NE(brace, std::string::npos) << remote.out;
  const json r = json::parse(remote.out.substr(brace, remote.out.find('\n', brace) - brace));
  EXPECT_EQ(r["text"], expected["text"]);
  expect_same_states(r["kv_transfer_params"]["hidden_states_path"], local_file);
}

INSTANTIATE_TEST_SUITE_P(PrefillNodes, HttpExtractHiddenStates, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param) + "_prefill"; });

}  // namespace
}  // namespace baton::testing
