// config_qwen3_5: what ModelConfig::parse needs beyond Qwen3-Next's keys for Qwen3.5 — the
// multimodal wrapper (Qwen3_5ForConditionalGeneration keeps its text model's keys in
// `text_config` and its tensors under model.language_model.; its vision tower is not run) and
// the newer `rope_parameters` object, which holds rope_theta and partial_rotary_factor.
//
// Qwen3.5's multimodal RoPE (mrope_section, mrope_interleaved) gives the three position axes the
// same value for text, which makes it ordinary (partial) RoPE: its keys are accepted and
// ignored. Other rope_types in rope_parameters are refused.
//
// Must not: run or load the vision tower, or accept images.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "nlohmann/json_fwd.hpp"

namespace baton {

// A Qwen3_5ForConditionalGeneration config.json: its text_config parsed as Qwen3_5ForCausalLM
// (with tie_word_embeddings, dtype and token ids taken from the top level when text_config lacks
// them), named after the wrapper, its tensors under model.language_model.
absl::StatusOr<ModelConfig> parse_qwen3_5_multimodal(const nlohmann::json& config, const nlohmann::json* gen,
                                                     const std::string& where);

// The object holding `key`: config["rope_parameters"] when it is an object with that key, else
// config itself.
const nlohmann::json& rope_parameters_or(const nlohmann::json& config, const std::string& key);

// rope_parameters, when present, must be an object whose rope_type (if any) is "default".
absl::Status check_rope_parameters(const nlohmann::json& config, const std::string& where);

}  // namespace baton
