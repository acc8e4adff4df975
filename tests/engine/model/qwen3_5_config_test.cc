// Qwen3.5's text model from config.json: the text-only Qwen3_5ForCausalLM, the published
// multimodal Qwen3_5ForConditionalGeneration (keys under text_config, tensors under
// model.language_model., the vision tower left alone), the newer rope_parameters object, and its
// mistakes refused with the key named. The fixtures' logits are transformer_test's.
#include "common/text_file.h"
#include "engine/model/config.h"
#include "engine/model/config_fields.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fixtures.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
using M = MixerKind;

TEST(Qwen35, TextOnlyConfigReadsRopeParameters) {
  const json raw = testing::fixture_config("qwen35-f32");
  ASSERT_TRUE(raw.contains("rope_parameters"));
  ASSERT_FALSE(raw.contains("rope_theta"));  // only inside rope_parameters
  auto c = ModelConfig::load(testing::fixture_path("qwen35-f32"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen35);
  EXPECT_EQ(c->mixers, (std::vector<M>{M::kLinearAttention, M::kLinearAttention, M::kLinearAttention, M::kAttention}));
  EXPECT_DOUBLE_EQ(c->rope_theta, raw["rope_parameters"]["rope_theta"].get<double>());
  EXPECT_EQ(c->rotary_dim, 8);  // partial_rotary_factor 0.5 of head_dim 16, from rope_parameters
  EXPECT_FALSE(c->has_experts());
  EXPECT_TRUE(c->attn_output_gate && c->zero_centered_norms && c->qk_norm && c->has_recurrent_layers);
  EXPECT_EQ(c->weights_prefix, "model.");
}

TEST(Qwen35, MultimodalConfigParsesItsTextModel) {
  const json raw = testing::fixture_config("qwen35-bf16");
  ASSERT_TRUE(raw.contains("text_config") && !raw.contains("hidden_size"));
  auto c = ModelConfig::load(testing::fixture_path("qwen35-bf16"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen35);
  EXPECT_EQ(c->architecture_name, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(c->weights_prefix, "model.language_model.");
  EXPECT_EQ(c->hidden_size, raw["text_config"]["hidden_size"].get<std::int32_t>());
  EXPECT_EQ(c->mixers, (std::vector<M>{M::kLinearAttention, M::kLinearAttention, M::kAttention}));
  EXPECT_EQ(c->rotary_dim, 8);  // 0.25 of head_dim 32
  EXPECT_TRUE(c->tie_word_embeddings);  // from the top level
  EXPECT_TRUE(c->has_recurrent_layers);
  EXPECT_TRUE(has_recurrent_layers_in(raw));  // the router's rule check sees the wrapper as a hybrid too
  // Its identity is the whole file's, not the text model's alone.
  json text = raw["text_config"];
  text["architectures"] = json::array({"Qwen3_5ForCausalLM"});
  auto inner = ModelConfig::parse(text, nullptr, "text");
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_NE(inner->identity, c->identity);
}

TEST(Qwen35, TheMultimodalCheckpointLoadsWithoutItsVisionTower) {
  auto c = ModelConfig::load(testing::fixture_path("qwen35-bf16"));
  ASSERT_TRUE(c.ok()) << c.status();
  auto ckpt = Checkpoint::open(testing::fixture_path("qwen35-bf16"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  bool vision = false;
  for (const std::string& n : (*ckpt)->names()) vision = vision || n.starts_with("model.visual.");
  EXPECT_TRUE(vision) << "the fixture should carry vision tensors for the loader to leave alone";
  auto backend = make_cpu_backend({});
  ASSERT_TRUE(backend.ok());
  auto w = ModelWeights::load(*c, *ckpt, **backend);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->layers.size(), 3u);
}

TEST(Qwen35, MistakesNameTheKey) {
  const json base = testing::fixture_config("qwen35-f32");
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"num_experts", 8}}, "`num_experts` is set, but Qwen3_5ForCausalLM has no mixture of experts"},
      {{{"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e6}}}}, "`rope_parameters` has rope_type \"yarn\""},
      {{{"rope_parameters", 3}}, "`rope_parameters` must be an object"},
      {{{"attention_bias", true}}, "`attention_bias` true is not supported on Qwen3_5ForCausalLM"},
      {{{"linear_num_key_heads", 3}}, "`linear_num_key_heads` (3) must divide linear_num_value_heads (4)"},
      {{{"linear_conv_kernel_dim", 1 << 30}}, "`linear_conv_kernel_dim` (1073741824) is more than the 17"},
      {{{"linear_key_head_dim", 512}}, "`linear_key_head_dim` (512) is more than the 256"},
      {{{"linear_value_head_dim", 4096}}, "`linear_value_head_dim` (4096) is more than the 1024"},
  };
  for (const auto& [patch, expected] : cases) {
    json bad = base;
    bad.merge_patch(patch);
    auto c = ModelConfig::parse(bad, nullptr, "config.json");
    ASSERT_FALSE(c.ok()) << patch.dump();
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << patch.dump();
  }
  json wrapper = testing::fixture_config("qwen35-bf16");
  wrapper.erase("text_config");
  EXPECT_THAT(ModelConfig::parse(wrapper, nullptr, "config.json").status().message(),
              HasSubstr("`text_config` must be an object"));
  // An error inside text_config says so.
  wrapper = testing::fixture_config("qwen35-bf16");
  wrapper["text_config"]["linear_conv_kernel_dim"] = 0;
  EXPECT_THAT(ModelConfig::parse(wrapper, nullptr, "config.json").status().message(),
              HasSubstr("config.json text_config: `linear_conv_kernel_dim`"));
}

}  // namespace
}  // namespace baton
