// Loading checkpoints: a good model loads; every kind of bad config or corrupt safetensors file
// gives an error that names the file and the tensor or key — and never reads out of bounds (this
// suite also runs under AddressSanitizer, see the asan preset).
#include <filesystem>
#include <fstream>

#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fixtures.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;

struct RawTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

// Writes a safetensors file from its parts: a header (which tests may doctor) and a data section.
void write_file(const fs::path& path, const std::string& header, const std::vector<std::uint8_t>& data,
                std::optional<std::uint64_t> declared_len = std::nullopt) {
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t len = declared_len.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

std::pair<json, std::vector<std::uint8_t>> layout(const std::map<std::string, RawTensor>& tensors) {
  json header = json::object();
  std::vector<std::uint8_t> data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  return {header, data};
}

RawTensor f32(std::vector<std::int64_t> shape, float value = 0.01f) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  RawTensor t{"F32", shape, std::vector<std::uint8_t>(static_cast<std::size_t>(n) * 4)};
  for (std::int64_t i = 0; i < n; ++i) std::memcpy(t.bytes.data() + i * 4, &value, 4);
  return t;
}

// A one-layer Llama small enough to write by hand.
json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 8}, {"intermediate_size", 12},
          {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
          {"vocab_size", 10}, {"rms_norm_eps", 1e-5}, {"torch_dtype", "float32"}, {"eos_token_id", 2}};
}

std::map<std::string, RawTensor> tiny_tensors() {
  return {{"model.embed_tokens.weight", f32({10, 8})},
          {"model.norm.weight", f32({8}, 1.0f)},
          {"lm_head.weight", f32({10, 8})},
          {"model.layers.0.input_layernorm.weight", f32({8}, 1.0f)},
          {"model.layers.0.post_attention_layernorm.weight", f32({8}, 1.0f)},
          {"model.layers.0.self_attn.q_proj.weight", f32({8, 8})},
          {"model.layers.0.self_attn.k_proj.weight", f32({4, 8})},
          {"model.layers.0.self_attn.v_proj.weight", f32({4, 8})},
          {"model.layers.0.self_attn.o_proj.weight", f32({8, 8})},
          {"model.layers.0.mlp.gate_proj.weight", f32({12, 8})},
          {"model.layers.0.mlp.up_proj.weight", f32({12, 8})},
          {"model.layers.0.mlp.down_proj.weight", f32({8, 12})}};
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("baton_loader_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_config(tiny_config());
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write_config(const json& c) { std::ofstream(dir_ / "config.json") << c.dump(); }
  void write_model(const std::map<std::string, RawTensor>& tensors) {
    auto [header, data] = layout(tensors);
    write_file(dir_ / "model.safetensors", header.dump(), data);
  }

  // Loads config + checkpoint + weights; returns the first error.
  absl::Status load() {
    auto config = ModelConfig::load(dir_.string());
    if (!config.ok()) return config.status();
    auto ckpt = Checkpoint::open(dir_.string());
    if (!ckpt.ok()) return ckpt.status();
    auto backend = make_cpu_backend({});
    BATON_CHECK(backend.ok(), "backend");
    return ModelWeights::load(*config, *ckpt, **backend).status();
  }

  fs::path dir_;
};

TEST_F(LoaderTest, GoodModelLoads) {
  write_model(tiny_tensors());
  EXPECT_TRUE(load().ok()) << load();
}

TEST_F(LoaderTest, UnsupportedArchitecture) {
  auto c = tiny_config();
  c["architectures"] = {"GPT2LMHeadModel"};
  write_config(c);
  const auto s = load();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("config.json"));
  EXPECT_THAT(s.message(), HasSubstr("GPT2LMHeadModel"));
}

TEST_F(LoaderTest, BadConfigFieldsNameTheKey) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"hidden_size", nullptr}}, "`hidden_size` is missing"},
      {{{"hidden_size", "big"}}, "`hidden_size` must be a positive integer"},
      {{{"num_key_value_heads", 3}}, "`num_key_value_heads`"},
      {{{"hidden_act", "gelu"}}, "`hidden_act`"},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, "yarn"},
      {{{"quantization_config", {{"quant_method", "awq"}}}}, "quantized"},
      {{{"eos_token_id", 99}}, "outside the vocabulary"},
      {{{"mlp_bias", true}}, "`mlp_bias`"},
  };
  write_model(tiny_tensors());
  for (const auto& [patch, expected] : cases) {
    auto c = tiny_config();
    c.merge_patch(patch);
    if (patch.contains("hidden_size") && patch["hidden_size"].is_null()) c.erase("hidden_size");
    write_config(c);
    const auto s = load();
    EXPECT_FALSE(s.ok()) << patch.dump();
    EXPECT_THAT(s.message(), HasSubstr(expected)) << patch.dump();
    EXPECT_THAT(s.message(), HasSubstr("config.json")) << patch.dump();
  }
}

TEST_F(LoaderTest, InvalidJsonAndMissingFiles) {
  std::ofstream(dir_ / "config.json") << "{ not json";
  EXPECT_THAT(load().message(), HasSubstr("not valid JSON"));
  write_config(tiny_config());
  EXPECT_THAT(load().message(), HasSubstr("no model.safetensors"));
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": "x"})";
  EXPECT_THAT(load().message(), HasSubstr("generation_config.json"));
  EXPECT_EQ(ModelConfig::load((dir_ / "nope").string()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LoaderTest, MissingTensorIsNamed) {
  auto t = tiny_tensors();
  t.erase("model.layers.0.self_attn.k_proj.weight");
  write_model(t);
  const auto s = load();
  EXPECT_THAT(s.message(), HasSubstr("`model.layers.0.self_attn.k_proj.weight` is missing"));
  EXPECT_THAT(s.message(), HasSubstr("[4, 8]"));
}

TEST_F(LoaderTest, WrongShapeNamesBothShapes) {
  auto t = tiny_tensors();
  t["model.layers.0.mlp.down_proj.weight"] = f32({12, 8});
  write_model(t);
  const auto s = load();
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("`model.layers.0.mlp.down_proj.weight` has shape [12, 8], expected [8, 12]"));
}

TEST_F(LoaderTest, NonFloatWeightDtype) {
  auto t = tiny_tensors();
  t["model.norm.weight"] = RawTensor{"I64", {8}, std::vector<std::uint8_t>(64)};
  write_model(t);
  EXPECT_THAT(load().message(), HasSubstr("`model.norm.weight` has dtype I64"));
}

TEST_F(LoaderTest, TruncatedFiles) {
  write_model(tiny_tensors());
  const auto path = dir_ / "model.safetensors";
  const auto full = fs::file_size(path);
  // Cut in the data section, in the header, and in the length field.
  for (std::uintmax_t size : {full - 1, full / 2, std::uintmax_t{20}, std::uintmax_t{5}, std::uintmax_t{0}}) {
    write_model(tiny_tensors());
    fs::resize_file(path, size);
    const auto s = load();
    EXPECT_FALSE(s.ok()) << size;
    EXPECT_THAT(s.message(), HasSubstr("model.safetensors")) << size;
  }
}

TEST_F(LoaderTest, HeaderThatLies) {
  auto [header, data] = layout(tiny_tensors());
  const auto path = dir_ / "model.safetensors";
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  // Header length beyond the file.
  write_file(path, header.dump(), data, std::uint64_t{1} << 40);
  EXPECT_THAT(load().message(), HasSubstr("header length"));
  // Not JSON.
  write_file(path, "{\"a\": [1, 2", data);
  EXPECT_THAT(load().message(), HasSubstr("not a JSON object"));
  // Offsets beyond the data section.
  auto h = header;
  h[name]["data_offsets"][1] = data.size() + 4096;
  write_file(path, h.dump(), data);
  EXPECT_THAT(load().message(), HasSubstr("`" + name + "`: data_offsets end"));
  // Byte count disagrees with dtype x shape.
  h = header;
  h[name]["shape"] = {12, 9};
  write_file(path, h.dump(), data);
  EXPECT_THAT(load().message(), HasSubstr("needs"));
  // Two tensors claiming the same bytes.
  h = header;
  h[name]["data_offsets"] = header["model.layers.0.mlp.gate_proj.weight"]["data_offsets"];
  write_file(path, h.dump(), data);
  EXPECT_THAT(load().message(), HasSubstr("overlap"));
  // Reversed offsets, negative dims, unknown dtype, shape that overflows.
  h = header;
  h[name]["data_offsets"] = {100, 4};
  write_file(path, h.dump(), data);
  EXPECT_THAT(load().message(), HasSubstr("reversed"));
  h = header;
  h[name]["shape"] = {-12, 8};
  write_file(path, h.dump(), data);
  EXPECT_THAT(load().message(), HasSubstr("negative"));
  h = header;
  h[name]["dtype"] = "Q4";
  write_file(path, h.dump(), data);
  EXPECT_THAT(load().message(), HasSubstr("unsupported dtype"));
  h = header;
  h[name]["shape"] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  write_file(path, h.dump(), data);
  EXPECT_THAT(load().message(), HasSubstr("overflows"));
}

TEST_F(LoaderTest, ShardedIndexErrors) {
  auto tensors = tiny_tensors();
  std::map<std::string, RawTensor> a, b;
  int i = 0;
  for (auto& [name, t] : tensors) (i++ % 2 ? a : b)[name] = t;
  auto [ha, da] = layout(a);
  auto [hb, db] = layout(b);
  write_file(dir_ / "model-00001-of-00002.safetensors", ha.dump(), da);
  write_file(dir_ / "model-00002-of-00002.safetensors", hb.dump(), db);
  json map = json::object();
  for (auto& [name, t] : a) map[name] = "model-00001-of-00002.safetensors";
  for (auto& [name, t] : b) map[name] = "model-00002-of-00002.safetensors";
  auto write_index = [&](const json& m) { std::ofstream(dir_ / "model.safetensors.index.json") << json{{"weight_map", m}}.dump(); };
  write_index(map);
  EXPECT_TRUE(load().ok()) << load();

  auto bad = map;
  bad[a.begin()->first] = "../../etc/passwd";
  write_index(bad);
  EXPECT_THAT(load().message(), HasSubstr("not a plain file name"));

  bad = map;
  bad[a.begin()->first] = "model-00002-of-00002.safetensors";
  write_index(bad);
  EXPECT_THAT(load().message(), HasSubstr("which does not contain it"));

  bad = map;
  bad["extra.weight"] = "model-00003-of-00003.safetensors";
  write_index(bad);
  EXPECT_THAT(load().message(), HasSubstr("model-00003-of-00003.safetensors: cannot open"));

  std::ofstream(dir_ / "model.safetensors.index.json") << "[]";
  EXPECT_THAT(load().message(), HasSubstr("weight_map"));
}

TEST(ModelConfig, ReadsEveryFixtureAndItsFeatures) {
  auto llama3 = ModelConfig::load(testing::fixture_path("llama3-bf16"));
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ(llama3->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(llama3->torch_dtype, DType::kBF16);
  EXPECT_EQ(llama3->eos_token_ids.size(), 2u);  // generation_config.json's list
  auto qwen3 = ModelConfig::load(testing::fixture_path("qwen3-bf16"));
  ASSERT_TRUE(qwen3.ok());
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_EQ(qwen3->head_dim, 24);
  auto mistral = ModelConfig::load(testing::fixture_path("mistral-f16"));
  ASSERT_TRUE(mistral.ok());
  EXPECT_EQ(mistral->sliding_window[0], 8);
  auto qwen2 = ModelConfig::load(testing::fixture_path("qwen2-f32"));
  ASSERT_TRUE(qwen2.ok());
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_EQ(qwen2->sliding_window[0], 0);  // sliding_window given but use_sliding_window false
  auto moe = ModelConfig::load(testing::fixture_path("qwen3-moe-f32"));
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_TRUE(moe->qk_norm);
  EXPECT_EQ(moe->num_experts, 8);
  EXPECT_EQ(moe->num_experts_per_tok, 2);
  EXPECT_TRUE(moe->norm_topk_prob);
  EXPECT_EQ(moe->sparse_mlp, (std::vector<bool>{true, false, true}));  // mlp_only_layers [1]
  EXPECT_EQ(ModelConfig::load(testing::fixture_path("qwen3-moe-bf16"))->sparse_mlp,
            (std::vector<bool>{false, true}));  // decoder_sparse_step 2
  auto qwen2_moe = ModelConfig::load(testing::fixture_path("qwen2-moe-f32"));
  ASSERT_TRUE(qwen2_moe.ok()) << qwen2_moe.status();
  EXPECT_TRUE(qwen2_moe->qkv_bias);
  EXPECT_FALSE(qwen2_moe->qk_norm);
  EXPECT_EQ(qwen2_moe->shared_expert_intermediate_size, 40);
  // Qwen3-Next: full_attention_interval 2 makes layers 1 and 3 full attention; partial rotary 0.5.
  auto next = ModelConfig::load(testing::fixture_path("qwen3-next-f32"));
  ASSERT_TRUE(next.ok()) << next.status();
  using M = MixerKind;
  EXPECT_EQ(next->mixers, (std::vector<M>{M::kLinearAttention, M::kAttention, M::kLinearAttention, M::kAttention}));
  EXPECT_EQ(next->num_attention_layers(), 2);
  EXPECT_EQ(next->rotary_dim, 8);
  EXPECT_TRUE(next->attn_output_gate && next->zero_centered_norms && next->qk_norm && next->has_recurrent_layers);
  EXPECT_EQ(next->linear_attention.num_key_heads, 2);
  EXPECT_EQ(next->linear_attention.num_value_heads, 4);
  EXPECT_EQ(next->linear_attention.conv_channels(), 2 * 2 * 16 + 4 * 8);
  EXPECT_EQ(next->shared_expert_intermediate_size, 40);
  EXPECT_EQ(next->sparse_mlp, (std::vector<bool>{true, false, true, true}));  // mlp_only_layers [1]
  auto next_bf16 = ModelConfig::load(testing::fixture_path("qwen3-next-bf16"));
  ASSERT_TRUE(next_bf16.ok()) << next_bf16.status();
  EXPECT_EQ(next_bf16->mixers, (std::vector<M>{M::kLinearAttention, M::kLinearAttention, M::kAttention}));
  EXPECT_EQ(next_bf16->rotary_dim, 8);  // 0.25 of head_dim 32
  EXPECT_FALSE(next_bf16->norm_topk_prob);
}

TEST(ModelConfig, HybridMistakesNameTheKey) {
  auto text = read_text_file(testing::fixture_path("qwen3-next-f32") + "/config.json");
  ASSERT_TRUE(text.ok());
  const json base = json::parse(*text);
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"layer_types", {"linear_attention", "full_attention"}}}, "`layer_types` must list one type for each of the 4 layers"},
      {{{"layer_types", {"mamba", "full_attention", "linear_attention", "full_attention"}}}, "`layer_types` entry 0 is \"mamba\""},
      {{{"partial_rotary_factor", 0.1}}, "`partial_rotary_factor` (0.1) must leave an even number of rotated dims"},
      {{{"partial_rotary_factor", 1.5}}, "`partial_rotary_factor`"},
      {{{"linear_num_key_heads", 3}}, "`linear_num_key_heads` (3) must divide linear_num_value_heads (4)"},
      {{{"linear_conv_kernel_dim", 0}}, "`linear_conv_kernel_dim` must be a positive integer"},
      {{{"attention_bias", true}}, "`attention_bias` true is not supported on Qwen3NextForCausalLM"},
      {{{"full_attention_interval", -2}}, "`full_attention_interval` must be a positive integer"},
  };
  for (const auto& [patch, expected] : cases) {
    json bad = base;
    bad.merge_patch(patch);
    if (patch.contains("full_attention_interval")) bad.erase("layer_types");
    auto c = ModelConfig::parse(bad, nullptr, "config.json");
    ASSERT_FALSE(c.ok()) << patch.dump();
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << patch.dump();
  }
  // Partial rotary is Qwen3-Next's alone here: elsewhere it would be silently ignored, so refused.
  auto qwen3 = json::parse(*read_text_file(testing::fixture_path("qwen3-bf16") + "/config.json"));
  qwen3["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(ModelConfig::parse(qwen3, nullptr, "config.json").status().message(),
              HasSubstr("`partial_rotary_factor` other than 1.0 is not supported on Qwen3ForCausalLM"));
}

// A one-layer Qwen3-MoE: 4 experts of 6, 2 per token.
json tiny_moe_config() {
  json c = tiny_config();
  c["architectures"] = {"Qwen3MoeForCausalLM"};
  c["head_dim"] = 4;
  c["num_experts"] = 4;
  c["num_experts_per_tok"] = 2;
  c["moe_intermediate_size"] = 6;
  return c;
}

std::map<std::string, RawTensor> tiny_moe_tensors() {
  auto t = tiny_tensors();
  for (const char* x : {"gate", "up", "down"}) t.erase(str_cat("model.layers.0.mlp.", x, "_proj.weight"));
  t["model.layers.0.self_attn.q_norm.weight"] = f32({4}, 1.0f);
  t["model.layers.0.self_attn.k_norm.weight"] = f32({4}, 1.0f);
  t["model.layers.0.mlp.gate.weight"] = f32({4, 8});
  for (int e = 0; e < 4; ++e) {
    const std::string p = str_cat("model.layers.0.mlp.experts.", e, ".");
    t[p + "gate_proj.weight"] = f32({6, 8});
    t[p + "up_proj.weight"] = f32({6, 8});
    t[p + "down_proj.weight"] = f32({8, 6});
  }
  return t;
}

TEST_F(LoaderTest, ExpertsLoadAndTheirMistakesAreNamed) {
  write_config(tiny_moe_config());
  write_model(tiny_moe_tensors());
  EXPECT_TRUE(load().ok()) << load();
  auto c = ModelConfig::load(dir_.string());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->sparse_mlp, std::vector<bool>{true});
  EXPECT_FALSE(c->norm_topk_prob);  // Qwen3MoeConfig's default

  auto missing = tiny_moe_tensors();
  missing.erase("model.layers.0.mlp.experts.3.up_proj.weight");
  write_model(missing);
  EXPECT_THAT(load().message(), HasSubstr("`model.layers.0.mlp.experts.3.up_proj.weight` is missing"));

  // mlp_only_layers keeps the dense MLP, whose tensors are then the ones expected.
  json dense = tiny_moe_config();
  dense["mlp_only_layers"] = {0};
  write_config(dense);
  write_model(tiny_moe_tensors());
  EXPECT_THAT(load().message(), HasSubstr("`model.layers.0.mlp.gate_proj.weight` is missing"));

  const std::vector<std::pair<json, std::string>> cases = {
      {{{"num_experts_per_tok", 5}}, "`num_experts_per_tok` (5) is more than num_experts (4)"},
      {{{"num_experts", 0}}, "`num_experts` must be a positive integer"},
      {{{"mlp_only_layers", {3}}}, "`mlp_only_layers` holds 3"},
      {{{"shared_expert_intermediate_size", 16}}, "`shared_expert_intermediate_size` is set, but Qwen3MoeForCausalLM has no shared expert"},
      {{{"decoder_sparse_step", -1}}, "`decoder_sparse_step`"},
  };
  for (const auto& [patch, expected] : cases) {
    json bad = tiny_moe_config();
    bad.merge_patch(patch);
    write_config(bad);
    EXPECT_THAT(load().message(), HasSubstr(expected)) << patch.dump();
  }
  // Qwen2-MoE: the shared expert and its gate are loaded too, and named when missing.
  json qwen2 = tiny_moe_config();
  qwen2["architectures"] = {"Qwen2MoeForCausalLM"};
  qwen2["shared_expert_intermediate_size"] = 10;
  qwen2.erase("head_dim");
  write_config(qwen2);
  auto with_shared = tiny_moe_tensors();
  with_shared.erase("model.layers.0.self_attn.q_norm.weight");
  with_shared.erase("model.layers.0.self_attn.k_norm.weight");
  with_shared["model.layers.0.self_attn.q_proj.bias"] = f32({8});
  with_shared["model.layers.0.self_attn.k_proj.bias"] = f32({4});
  with_shared["model.layers.0.self_attn.v_proj.bias"] = f32({4});
  with_shared["model.layers.0.mlp.shared_expert.gate_proj.weight"] = f32({10, 8});
  with_shared["model.layers.0.mlp.shared_expert.up_proj.weight"] = f32({10, 8});
  with_shared["model.layers.0.mlp.shared_expert.down_proj.weight"] = f32({8, 10});
  write_model(with_shared);
  EXPECT_THAT(load().message(), HasSubstr("`model.layers.0.mlp.shared_expert_gate.weight` is missing (expected [1, 8]"));
  with_shared["model.layers.0.mlp.shared_expert_gate.weight"] = f32({1, 8});
  write_model(with_shared);
  EXPECT_TRUE(load().ok()) << load();

  // Experts on an architecture without them would be ignored: refused.
  json llama = tiny_config();
  llama["num_local_experts"] = 8;
  write_config(llama);
  EXPECT_THAT(load().message(), HasSubstr("`num_local_experts` is set, but LlamaForCausalLM has no mixture of experts"));
}

TEST(ModelConfig, RecurrentLayersAreDerivedFromTheConfig) {
  using nlohmann::json;
  // Attention-only configs, including Qwen2's sliding/full layer_types.
  EXPECT_FALSE(has_recurrent_layers_in(json{{"architectures", {"LlamaForCausalLM"}}}));
  EXPECT_FALSE(has_recurrent_layers_in(
      json{{"architectures", {"Qwen2ForCausalLM"}}, {"layer_types", {"full_attention", "sliding_attention"}}}));
  // Hybrids, however they say it.
  EXPECT_TRUE(has_recurrent_layers_in(
      json{{"architectures", {"Qwen3NextForCausalLM"}}, {"layer_types", {"linear_attention", "full_attention"}}}));
  EXPECT_TRUE(has_recurrent_layers_in(json{{"layer_types", {"full_attention", "linear_attention"}}}));
  EXPECT_TRUE(has_recurrent_layers_in(json{{"layers_block_type", {"mamba", "attention"}}}));
  EXPECT_TRUE(has_recurrent_layers_in(json{{"hybrid_override_pattern", "M-M*-"}}));
  EXPECT_TRUE(has_recurrent_layers_in(json{{"architectures", {"JambaForCausalLM"}}}));
  EXPECT_TRUE(has_recurrent_layers_in(json{{"architectures", {"MambaForCausalLM"}}}));
  // Loading a recurrent architecture Baton cannot run says why.
  json jamba = {{"architectures", {"JambaForCausalLM"}}, {"layers_block_type", {"mamba", "attention"}}};
  auto c = ModelConfig::parse(jamba, nullptr, "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("recurrent layers"));
  // Only the hybrid fixtures have recurrent layers, and each identity is a hash of config.json.
  for (const std::string& name : testing::fixture_names()) {
    auto f = ModelConfig::load(testing::fixture_path(name));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->has_recurrent_layers, testing::fixture_is_hybrid(name)) << name;
    EXPECT_EQ(f->num_recurrent_layers() > 0, testing::fixture_is_hybrid(name)) << name;
    EXPECT_NE(f->identity, 0u) << name;
  }
  EXPECT_NE(ModelConfig::load(testing::fixture_path("llama-f32"))->identity,
            ModelConfig::load(testing::fixture_path("qwen2-f32"))->identity);
}

}  // namespace
}  // namespace baton
