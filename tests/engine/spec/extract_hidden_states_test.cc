// extract_hidden_states: the files it writes hold the prompt and the residual stream entering the
// chosen layers, equal to the float64 reference's states (tools/reference/transformer_ref.py, in
// each fixture's reference.json) on every fixture architecture; output is plain decoding's; chunked
// prefill writes the same bytes; a prefill-role engine reports the file with the hand-off; aborted
// or failed requests leave nothing behind; bad configurations are refused naming the key.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/model/safetensors.h"
#include "engine/spec/hidden_states_file.h"
#include "engine/spec/kv_transfer_config.h"
#include "gtest/gtest.h"
#include "tests/engine/spec/spec_engine_support.h"
#include "tests/support/scratch.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::fixture_names;
using testing::fixture_path;
using testing::Job;
using testing::load_reference;

SpeculativeConfig extract_config(std::vector<std::int32_t> layers, const fs::path& dir) {
  SpeculativeConfig sc;
  sc.method = SpecMethod::kExtractHiddenStates;
  sc.num_speculative_tokens = 1;
  sc.hidden_state_layer_ids = std::move(layers);
  sc.hidden_states_dir = dir.string();
  return sc;
}

// An engine on the llama-f32 fixture extracting `layers` into `dir` (the callers set what differs).
EngineConfig extract_engine_config(std::vector<std::int32_t> layers, const fs::path& dir) {
  EngineConfig c;
  c.model_dir = fixture_path("llama-f32");
  c.backend.num_threads = 2;
  c.kv_cache_bytes = 8 << 20;
  c.speculative = extract_config(std::move(layers), dir);
  return c;
}

struct SavedStates {
  std::vector<std::int64_t> token_ids;
  std::vector<std::int64_t> shape;  // [tokens, layers, hidden]
  std::vector<float> states;
};

SavedStates read_saved(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  SavedStates s;
  if (!file.ok()) return s;
  EXPECT_EQ(file->tensors().size(), 2u);
  for (const TensorInfo& t : file->tensors()) {
    if (t.name == "token_ids") {
      EXPECT_EQ(t.dtype, DType::kI64);
      s.token_ids.resize(static_cast<std::size_t>(t.numel()));
      std::memcpy(s.token_ids.data(), t.data, t.bytes);
    } else {
      EXPECT_EQ(t.name, "hidden_states");
      EXPECT_EQ(t.dtype, DType::kF32);
      s.shape = t.shape;
      s.states.resize(static_cast<std::size_t>(t.numel()));
      std::memcpy(s.states.data(), t.data, t.bytes);
    }
  }
  return s;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Runs one request to completion; returns its last output.
RequestOutput run_one(Engine& engine, const std::string& id, const std::vector<std::int32_t>& prompt,
                      std::int32_t max_tokens, std::vector<std::int32_t>* tokens = nullptr) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  const absl::Status added = engine.add_request(id, prompt, p);
  EXPECT_TRUE(added.ok()) << added;
  RequestOutput last;
  while (engine.has_unfinished()) {
    auto outs = engine.step();
    EXPECT_TRUE(outs.ok()) << outs.status();
    if (!outs.ok()) break;
    for (RequestOutput& o : *outs) {
      if (tokens != nullptr) {
        for (const TokenOutput& t : o.new_tokens) tokens->push_back(t.token);
      }
      last = std::move(o);
    }
  }
  return last;
}

class ExtractOnFixture : public ::testing::TestWithParam<std::string> {};

// Every architecture (dense, MoE, sliding window, hybrid linear attention, Mamba-2): the saved
// states are the reference's inputs of the chosen layers, in the order the config lists them.
TEST_P(ExtractOnFixture, SavedStatesEqualTheReference) {
  const std::string name = GetParam();
  const auto ref = load_reference(name);
  const auto n_layers = static_cast<std::int32_t>(ref.hidden_states.size()) - 1;
  std::vector<std::int32_t> layers;
  for (std::int32_t l = n_layers - 1; l >= 0; --l) layers.push_back(l);  // reversed: order is the config's
  const fs::path dir = testing::scratch_path("extract-" + name);
  auto engine = testing::make_engine(name, extract_config(layers, dir));
  const RequestOutput o = run_one(*engine, "req/../x", ref.prompt, 1);
  ASSERT_EQ(o.finish_reason, FinishReason::kLength) << o.error;
  ASSERT_FALSE(o.hidden_states_path.empty());
  EXPECT_EQ(fs::path(o.hidden_states_path).parent_path(), fs::absolute(dir).lexically_normal());
  const SavedStates s = read_saved(o.hidden_states_path);
  const auto n = static_cast<std::int64_t>(ref.prompt.size());
  const auto h = static_cast<std::int64_t>(ref.hidden_states[0][0].size());
  ASSERT_EQ(s.shape, (std::vector<std::int64_t>{n, static_cast<std::int64_t>(layers.size()), h}));
  ASSERT_EQ(s.token_ids, std::vector<std::int64_t>(ref.prompt.begin(), ref.prompt.end()));
  double worst = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto& want = ref.hidden_states[static_cast<std::size_t>(layers[l])][static_cast<std::size_t>(t)];
      for (std::int64_t i = 0; i < h; ++i) {
        const float got = s.states[static_cast<std::size_t>((t * static_cast<std::int64_t>(layers.size()) +
                                                             static_cast<std::int64_t>(l)) * h + i)];
        worst = std::max(worst, std::abs(static_cast<double>(got) - want[static_cast<std::size_t>(i)]));
      }
    }
  }
  EXPECT_LT(worst, 1e-4) << name;
  // Only the finished file is left: no temporary.
  EXPECT_EQ(files_in(dir), std::set<std::string>{fs::path(o.hidden_states_path).filename().string()});
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExtractOnFixture, ::testing::ValuesIn(fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string s = p.param;
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

TEST(ExtractHiddenStates, OutputIsPlainDecodingsAndChunkingWritesTheSameBytes) {
  const std::string model = "llama-f32";
  const auto ref = load_reference(model);
  auto jobs = testing::jobs_for(static_cast<std::int32_t>(ref.logits[0].size()), /*include_sampled=*/true);
  auto plain = testing::make_engine(model, std::nullopt);
  const auto want = testing::run(*plain, jobs);

  const fs::path dir = testing::scratch_path("extract-batch");
  auto extract = testing::make_engine(model, extract_config({1, 0}, dir));
  EXPECT_EQ(testing::run(*extract, jobs), want);
  EXPECT_EQ(files_in(dir).size(), jobs.size());  // one file per request (ids are distinct)

  // The same prompt prefilled in chunks of 5 tokens: the same file, byte for byte.
  EngineConfig c = extract_engine_config({1, 0}, testing::scratch_path("extract-chunked"));
  c.scheduler.max_num_batched_tokens = 5;
  c.scheduler.max_num_seqs = 4;
  auto chunked = Engine::create(c);
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  const RequestOutput a = run_one(**chunked, "g3", jobs[3].prompt, 2);
  ASSERT_FALSE(a.hidden_states_path.empty()) << a.error;
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(bytes(a.hidden_states_path), bytes((dir / "g3.safetensors").string()));
}

TEST(ExtractHiddenStates, PrefillRoleReportsTheFileWithTheHandoff) {
  const std::string model = "llama-f32";
  const auto ref = load_reference(model);
  const fs::path dir = testing::scratch_path("extract-prefill");
  EngineConfig c = extract_engine_config({0}, dir);
  c.role = NodeRole::kPrefill;
  auto engine = Engine::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 8;
  AddRequestOptions options;
  options.prefill_only = true;
  ASSERT_TRUE((*engine)->add_request("p0", ref.prompt, p, options).ok());
  std::optional<RequestOutput> handed;
  for (int i = 0; i < 8 && !handed; ++i) {
    auto outs = (*engine)->step();
    ASSERT_TRUE(outs.ok()) << outs.status();
    for (RequestOutput& o : *outs) {
      if (o.handoff) handed = std::move(o);
    }
  }
  ASSERT_TRUE(handed.has_value());
  EXPECT_EQ(handed->hidden_states_path, (fs::absolute(dir).lexically_normal() / "p0.safetensors").string());
  EXPECT_EQ(read_saved(handed->hidden_states_path).token_ids.size(), ref.prompt.size());
  EXPECT_TRUE(handed->handoff->proposer.feature_rows.empty());  // nothing of it travels to D
  ASSERT_TRUE((*engine)->release("p0").ok());
}

TEST(ExtractHiddenStates, AbortedAndFailedRequestsLeaveNoFiles) {
  const std::string model = "llama-f32";
  const auto ref = load_reference(model);
  const fs::path dir = testing::scratch_path("extract-abort");
  EngineConfig c = extract_engine_config({1}, dir);
  c.scheduler.max_num_batched_tokens = 8;  // the 24-token prompt takes three steps
  auto engine = Engine::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 4;
  ASSERT_TRUE((*engine)->add_request("a", ref.prompt, p).ok());
  ASSERT_TRUE((*engine)->step().ok());  // the first chunk is in a temporary file
  EXPECT_EQ(files_in(dir).size(), 1u);
  (*engine)->abort("a");
  while ((*engine)->has_unfinished()) ASSERT_TRUE((*engine)->step().ok());
  EXPECT_TRUE(files_in(dir).empty());

  // The directory disappears: the next request fails alone, with the reason, and the engine goes on.
  fs::remove_all(dir);
  std::vector<std::int32_t> failed_tokens;
  const RequestOutput failed = run_one(**engine, "b", ref.prompt, 4, &failed_tokens);
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  EXPECT_NE(failed.error.find("extract_hidden_states: cannot create a file in"), std::string::npos) << failed.error;
  EXPECT_TRUE(failed_tokens.empty());
  fs::create_directories(dir);
  const RequestOutput ok = run_one(**engine, "c", ref.prompt, 2);
  EXPECT_EQ(ok.finish_reason, FinishReason::kLength) << ok.error;
  EXPECT_FALSE(ok.hidden_states_path.empty());
}

TEST(ExtractHiddenStates, FileNamesStayInTheDirectoryAndApart) {
  EXPECT_EQ(hidden_states_file_name("req-0a1b"), "req-0a1b.safetensors");
  EXPECT_EQ(hidden_states_file_name("client~1f"), "client~1f.safetensors");
  std::set<std::string> names;
  for (const char* id : {"../../etc/passwd", "..", ".", "", "a/b", "a_b", "a\\b", "a b", ".hidden",
                         "x\n", std::string(300, 'x').c_str()}) {
    const std::string n = hidden_states_file_name(id);
    EXPECT_EQ(n.find('/'), std::string::npos) << n;
    EXPECT_NE(n.front(), '.') << n;
    EXPECT_LT(n.size(), 200u) << n;
    EXPECT_TRUE(names.insert(n).second) << "two ids share " << n;
  }
}

TEST(ExtractHiddenStates, BadConfigurationsAreRefusedNamingTheKey) {
  auto parse_error = [](const std::string& json) {
    return std::string(SpeculativeConfig::parse(json, NodeRole::kColocated).status().message());
  };
  const std::string ids = R"("draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [0, 1]}})";
  auto ok = SpeculativeConfig::parse(R"({"method": "extract_hidden_states", )" + ids + "}", NodeRole::kPrefill);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->num_speculative_tokens, 1);
  EXPECT_EQ(ok->hidden_state_layer_ids, (std::vector<std::int32_t>{0, 1}));
  auto round = SpeculativeConfig::from_json(ok->to_json(), NodeRole::kPrefill);
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(round->hidden_state_layer_ids, ok->hidden_state_layer_ids);

  EXPECT_NE(parse_error(R"({"method": "extract_hidden_states"})").find("`draft_model_config` is required"), std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "extract_hidden_states", "num_speculative_tokens": 2, )" + ids + "}")
                .find("must be 1"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "extract_hidden_states", "draft_model_config": {"hf_config": )"
                        R"({"eagle_aux_hidden_state_layer_ids": [1, 1]}}})")
                .find("distinct"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "extract_hidden_states", "draft_model_config": {"model": "x"}})")
                .find("Baton reads no other key"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"method": "ngram", "num_speculative_tokens": 2, )" + ids + "}")
                .find("extract_hidden_states only"),
            std::string::npos);

  EXPECT_TRUE(parse_kv_transfer_config(R"({"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
      "kv_connector_extra_config": {"shared_storage_path": "/data/hs"}})")
                  .ok());
  for (const auto& [json, needle] : std::vector<std::pair<std::string, std::string>>{
           {"[]", "expected a JSON object"},
           {R"({"kv_connector": "NixlConnector", "kv_connector_extra_config": {"shared_storage_path": "/d"}})", "kv_connector"},
           {R"({"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_consumer",
               "kv_connector_extra_config": {"shared_storage_path": "/d"}})", "kv_role"},
           {R"({"kv_connector": "ExampleHiddenStatesConnector"})", "shared_storage_path is required"},
           {R"({"kv_connector": "ExampleHiddenStatesConnector", "kv_connector_extra_config": {"shared_storage_path": "/d",
               "allow_custom_save_path": true}})", "allow_custom_save_path"},
           {R"({"kv_connector": "ExampleHiddenStatesConnector", "kv_connector_extra_config": {"shared_storage_path": ""}})",
            "must be a directory path"},
           {R"({"kv_connector": "ExampleHiddenStatesConnector", "kv_port": 1,
               "kv_connector_extra_config": {"shared_storage_path": "/d"}})", "`kv_port`"}}) {
    auto r = parse_kv_transfer_config(json);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  }

  // Layer ids beyond the target, and a directory that cannot be made, fail at start-up.
  EngineConfig c = extract_engine_config({2}, testing::scratch_path("extract-bad"));
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("layer 2 is outside the target's 2 layers"), std::string::npos) << e.status();
  const fs::path file = testing::scratch_path("extract-not-a-dir");
  std::ofstream(file.string()) << "x";
  c.speculative = extract_config({1}, file / "sub");
  e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("shared_storage_path"), std::string::npos) << e.status();
  c.speculative = extract_config({1}, "");
  e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--kv-transfer-config"), std::string::npos) << e.status();
}

}  // namespace
}  // namespace baton
