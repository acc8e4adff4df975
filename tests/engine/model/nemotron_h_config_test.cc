// Nemotron-H (the Mamba-2 hybrid) from config.json and its checkpoint: the block pattern in either
// vocabulary, the Mamba-2 keys, Python's Infinity in time_step_limit, and every unsupported or
// inconsistent value refused with its key named. The fixtures' logits are transformer_test's.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/text_file.h"
#include "engine/model/config.h"
#include "engine/model/config_fields.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fixtures.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
using M = MixerKind;

TEST(NemotronH, FixtureConfigsParseAsPublished) {
  // nemotron-h-f32: "M-*M-M", attention_head_dim, time_step_limit [0.0, Infinity] written literally.
  auto text = read_text_file(testing::fixture_path("nemotron-h-f32") + "/config.json");
  ASSERT_TRUE(text.ok());
  ASSERT_THAT(*text, HasSubstr("Infinity"));  // what Hugging Face writes; the loader must take it
  auto f32 = ModelConfig::load(testing::fixture_path("nemotron-h-f32"));
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->architecture, Architecture::kNemotronH);
  EXPECT_EQ(f32->mixers, (std::vector<M>{M::kMamba2, M::kNone, M::kAttention, M::kMamba2, M::kNone, M::kMamba2}));
  EXPECT_EQ(f32->has_mlp, (std::vector<bool>{false, true, false, false, true, false}));
  EXPECT_EQ(f32->num_attention_layers(), 1);
  EXPECT_EQ(f32->num_recurrent_layers(), 3);
  EXPECT_EQ(f32->head_dim, 16);
  EXPECT_FALSE(f32->rope);
  EXPECT_EQ(f32->mlp_activation, MlpActivation::kReluSquared);
  EXPECT_TRUE(f32->has_recurrent_layers);
  EXPECT_FLOAT_EQ(f32->rms_norm_eps, 1e-5f);
  const Mamba2Config& m = f32->mamba2;
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.head_dim, 8);
  EXPECT_EQ(m.state_size, 16);
  EXPECT_EQ(m.num_groups, 2);
  EXPECT_EQ(m.conv_kernel, 4);
  EXPECT_TRUE(m.conv_bias);
  EXPECT_EQ(m.conv_channels(), 64 + 2 * 2 * 16);
  EXPECT_EQ(m.projection_width(), 64 + 128 + 8);
  EXPECT_EQ(f32->conv_state_floats(), 3 * 128);
  EXPECT_EQ(f32->recurrent_state_floats(), 64 * 16);
  EXPECT_EQ(m.dt_min, 0.0f);
  EXPECT_TRUE(std::isinf(m.dt_max));

  // nemotron-h-bf16: "M*M-M", head_dim key, no conv bias, a finite dt limit, tied embeddings.
  auto bf16 = ModelConfig::load(testing::fixture_path("nemotron-h-bf16"));
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->mixers, (std::vector<M>{M::kMamba2, M::kAttention, M::kMamba2, M::kNone, M::kMamba2}));
  EXPECT_EQ(bf16->head_dim, 12);
  EXPECT_FALSE(bf16->mamba2.conv_bias);
  EXPECT_FLOAT_EQ(bf16->mamba2.dt_max, 0.5f);
  EXPECT_TRUE(bf16->tie_word_embeddings);
}

TEST(NemotronH, ParameterCountIsTheCheckpointsTensors) {
  for (const std::string name : {"nemotron-h-f32", "nemotron-h-bf16"}) {
    auto c = ModelConfig::load(testing::fixture_path(name));
    ASSERT_TRUE(c.ok()) << c.status();
    auto ckpt = Checkpoint::open(testing::fixture_path(name));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    std::int64_t stored = 0;
    for (const std::string& n : (*ckpt)->names()) {
      std::int64_t numel = 1;
      for (std::int64_t d : (*ckpt)->find(n)->shape) numel *= d;
      stored += numel;
    }
    EXPECT_EQ(c->num_parameters(), stored) << name;
    EXPECT_EQ(c->num_active_parameters(), stored) << name;
  }
}

TEST(NemotronH, LayersBlockTypeAndADerivedLayerCountParseTheSame) {
  const json base = testing::fixture_config("nemotron-h-f32");
  const auto reference = ModelConfig::parse(base, nullptr, "config.json");
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const json& types : {json{"mamba", "mlp", "attention", "mamba", "mlp", "mamba"},
                            json{"linear_attention", "mlp", "full_attention", "linear_attention", "mlp",
                                 "linear_attention"}}) {
    json alt = base;
    alt.erase("hybrid_override_pattern");
    alt.erase("num_hidden_layers");
    alt["layers_block_type"] = types;
    auto c = ModelConfig::parse(alt, nullptr, "config.json");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->num_layers, 6);
    EXPECT_EQ(c->mixers, reference->mixers);
    EXPECT_EQ(c->has_mlp, reference->has_mlp);
  }
}

TEST(NemotronH, MistakesNameTheKey) {
  const json base = testing::fixture_config("nemotron-h-f32");
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"hybrid_override_pattern", "M-*E-M"}}, "mixture-of-experts block (E) at layer 3"},
      {{{"hybrid_override_pattern", "M-*M-"}}, "`hybrid_override_pattern` has 5 blocks but num_hidden_layers is 6"},
      {{{"hybrid_override_pattern", "M-*MxM"}}, "`hybrid_override_pattern` has 'x' at layer 4"},
      {{{"mlp_hidden_act", "silu"}}, "`mlp_hidden_act` is \"silu\"; only \"relu2\" is supported"},
      {{{"mamba_hidden_act", "gelu"}}, "`mamba_hidden_act` is \"gelu\""},
      {{{"use_bias", true}}, "`use_bias` true is not supported"},
      {{{"mamba_proj_bias", true}}, "`mamba_proj_bias` true is not supported"},
      {{{"n_groups", 3}}, "`n_groups` (3) must divide mamba_num_heads (8)"},
      {{{"ssm_state_size", 0}}, "`ssm_state_size` must be a positive integer"},
      {{{"time_step_limit", {0.5, 0.1}}}, "`time_step_limit` must be [min, max] with 0 <= min < max"},
      {{{"time_step_limit", "wide"}}, "`time_step_limit`"},
      {{{"mlp_bias", true}}, "`mlp_bias` true is not supported"},
      {{{"mamba_num_heads", 1 << 20}, {"n_groups", 1}}, "state per layer; at most"},
      {{{"conv_kernel", 100000}}, "`conv_kernel` (100000) is more than the 17 Baton's kernels support"},
      {{{"ssm_state_size", 4096}}, "`ssm_state_size` (4096) is more than the 256"},
      {{{"mamba_head_dim", 2048}}, "`mamba_head_dim` (2048) is more than the 1024"},
  };
  for (const auto& [patch, expected] : cases) {
    json bad = base;
    bad.merge_patch(patch);
    auto c = ModelConfig::parse(bad, nullptr, "config.json");
    ASSERT_FALSE(c.ok()) << patch.dump();
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << patch.dump();
  }
  json no_pattern = base;
  no_pattern.erase("hybrid_override_pattern");
  EXPECT_THAT(ModelConfig::parse(no_pattern, nullptr, "config.json").status().message(),
              HasSubstr("`hybrid_override_pattern` is missing"));
}

TEST(NemotronH, PythonJsonTokensBecomeStandardJson) {
  EXPECT_EQ(standardize_python_json(R"({"a": [0.0, Infinity], "b": -Infinity, "c": NaN})"),
            R"({"a": [0.0, 1e308], "b": -1e308, "c": null})");
  // Inside strings nothing changes, escaped quotes included.
  const std::string quoted = R"({"name": "Infinity \" NaN", "x": 1})";
  EXPECT_EQ(standardize_python_json(quoted), quoted);
}

TEST(NemotronH, AMissingMambaTensorIsNamed) {
  // Copy the fixture with one tensor renamed in the safetensors header (same length, so offsets hold).
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("baton_nemotron_missing_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path src = testing::fixture_path("nemotron-h-f32");
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dir / e.path().filename());
  const fs::path st = dir / "model.safetensors";
  ASSERT_TRUE(fs::exists(st));
  std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
  std::string head(8 + 65536, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  const std::size_t at = head.find("backbone.layers.3.mixer.dt_bias");
  ASSERT_NE(at, std::string::npos);
  f.seekp(static_cast<std::streamoff>(at + std::string("backbone.layers.3.mixer.").size()));
  f.write("xx", 2);
  f.close();
  auto config = ModelConfig::load(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto backend = make_cpu_backend({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto w = ModelWeights::load(*config, *ckpt, **backend);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("`backbone.layers.3.mixer.dt_bias` is missing"));
  EXPECT_THAT(w.status().message(), HasSubstr("[mamba_num_heads]"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace baton
