// Access to the fixture models the test run generates (tools/fixtures/make_fixtures.py, run by
// the ctest fixture `model_fixtures`) and their reference outputs from tools/reference/.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/text_file.h"
#include "engine/model/config.h"
#include "engine/model/config_fields.h"
#include "nlohmann/json.hpp"

namespace baton::testing {

inline std::string fixtures_dir() {
  const char* dir = std::getenv("BATON_FIXTURES_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : std::string(BATON_FIXTURES_DIR);
}

// The bundled trained hybrid (models/baton-tiny-hybrid: Qwen3-Next layout with its MTP module),
// which the hybrid tests use beside the random fixtures: fixture_path() knows it by this name.
inline constexpr const char* kBundledHybrid = "baton-tiny-hybrid";

inline std::string fixture_path(const std::string& name) {
  if (name == kBundledHybrid) return std::string(BATON_SOURCE_DIR) + "/models/baton-tiny-hybrid/target";
  return fixtures_dir() + "/" + name;
}

// The fixture set, known at compile time so parameterized tests can be listed before the fixtures
// exist; a test checks it against the generated manifest.json.
inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names = {"llama-f32",     "llama3-bf16",   "mistral-f16",
                                                 "qwen2-f32",     "qwen3-bf16",    "qwen2-swa-f32",
                                                 "llama-bias-linear-f32", "qwen3-moe-f32", "qwen3-moe-bf16",
                                                 "qwen2-moe-f32", "qwen3-next-f32", "qwen3-next-bf16",
                                                 "nemotron-h-f32", "nemotron-h-bf16", "qwen35-f32", "qwen35-bf16"};
  return names;
}

// The hybrid fixtures: layers with a recurrent state (Qwen3-Next's and Qwen3.5's Gated DeltaNet,
// Nemotron-H's Mamba-2).
inline bool fixture_is_hybrid(const std::string& name) {
  return name.find("-next-") != std::string::npos || name.starts_with("nemotron-h-") || name.starts_with("qwen35-");
}

// A fixture name as a gtest parameter name ("llama-f32" -> "llama_f32").
inline std::string test_name_for(std::string fixture) {
  for (char& c : fixture) c = c == '-' ? '_' : c;
  return fixture;
}

// A fixture's config.json, parsed as the loader reads it (Python's Infinity/NaN made standard).
inline nlohmann::json fixture_config(const std::string& name) {
  auto text = read_text_file(fixture_path(name) + "/config.json");
  BATON_CHECK(text.ok(), text.status().ToString());
  return nlohmann::json::parse(standardize_python_json(*text));
}

inline std::vector<std::string> manifest_fixture_names() {
  auto text = read_text_file(fixtures_dir() + "/manifest.json");
  BATON_CHECK(text.ok(), text.status().ToString());
  return nlohmann::json::parse(*text)["fixtures"].get<std::vector<std::string>>();
}

struct Reference {
  std::vector<std::int32_t> prompt;
  std::vector<std::vector<double>> logits;  // [prompt positions][vocab]
  // [layers + 1][prompt positions][hidden]: each layer's input, then the final norm's output.
  std::vector<std::vector<std::vector<double>>> hidden_states;
  std::vector<std::int32_t> greedy;
  std::vector<std::int32_t> eos;
  int max_new_tokens = 0;
};

inline Reference load_reference(const std::string& name) {
  auto text = read_text_file(fixture_path(name) + "/reference.json");
  BATON_CHECK(text.ok(), text.status().ToString());
  const auto j = nlohmann::json::parse(*text);
  Reference r;
  r.prompt = j["prompt_token_ids"].get<std::vector<std::int32_t>>();
  r.logits = j["logits"].get<std::vector<std::vector<double>>>();
  r.hidden_states = j["hidden_states"].get<std::vector<std::vector<std::vector<double>>>>();
  r.greedy = j["greedy_token_ids"].get<std::vector<std::int32_t>>();
  r.eos = j["eos_token_ids"].get<std::vector<std::int32_t>>();
  r.max_new_tokens = j["max_new_tokens"].get<int>();
  return r;
}

}  // namespace baton::testing
