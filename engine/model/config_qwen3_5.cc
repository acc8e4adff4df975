#include "engine/model/config_qwen3_5.h"

#include "common/status.h"
#include "engine/model/config_fields.h"
#include "nlohmann/json.hpp"
#include "xxhash.h"

namespace baton {

using nlohmann::json;

absl::StatusOr<ModelConfig> parse_qwen3_5_multimodal(const json& config, const json* gen, const std::string& where) {
  auto it = config.find("text_config");
  if (it == config.end() || !it->is_object()) {
    return field_error(where, "text_config", "must be an object (Qwen3_5ForConditionalGeneration keeps its text model there)");
  }
  json text = *it;
  text["architectures"] = json::array({"Qwen3_5ForCausalLM"});
  for (const char* key : {"tie_word_embeddings", "torch_dtype", "dtype", "eos_token_id", "bos_token_id"}) {
    if (!text.contains(key) && config.contains(key)) text[key] = config[key];
  }
  BATON_ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::parse(text, gen, where + " text_config"));
  c.architecture_name = "Qwen3_5ForConditionalGeneration";
  c.weights_prefix = "model.language_model.";
  const std::string canonical = config.dump();
  c.identity = XXH3_64bits(canonical.data(), canonical.size());
  return c;
}

const json& rope_parameters_or(const json& config, const std::string& key) {
  if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object() && it->contains(key)) return *it;
  return config;
}

absl::Status check_rope_parameters(const json& config, const std::string& where) {
  auto it = config.find("rope_parameters");
  if (it == config.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return field_error(where, "rope_parameters", "must be an object");
  if (auto t = it->find("rope_type"); t != it->end() && !t->is_null() && *t != "default") {
    return field_error(where, "rope_parameters",
                       str_cat("has rope_type ", t->dump(), "; only \"default\" is supported in rope_parameters"));
  }
  return absl::OkStatus();
}

}  // namespace baton
