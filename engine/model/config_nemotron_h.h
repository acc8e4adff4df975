// config_nemotron_h: the NemotronHForCausalLM part of ModelConfig::parse — its block pattern
// (hybrid_override_pattern "M-*…", or the newer layers_block_type list), the Mamba-2 mixer's keys
// and the checks that keep out what Baton does not run (MoE blocks "E", projection biases, other
// activations).
//
// Why Nemotron-H for the Mamba-2 hybrid: its blocks are one sublayer each, so the Mamba-2 mixer,
// attention and the MLP stand alone, and its published checkpoints (Nemotron-H 8B/47B/56B,
// Nemotron Nano 2) are the most served Mamba-2 hybrids.
//
// Must not: read generic fields (config.cc does), or accept a key value it does not implement.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "nlohmann/json_fwd.hpp"

namespace baton {

// The block pattern's length: the layer count when num_hidden_layers is absent.
absl::StatusOr<std::int32_t> nemotron_h_num_layers(const nlohmann::json& config, const std::string& where);

// The head_dim Nemotron-H configs give (head_dim, else attention_head_dim), 0 when neither.
absl::StatusOr<std::int32_t> nemotron_h_head_dim(const nlohmann::json& config, const std::string& where);

// Fills c.mixers, c.has_mlp, c.mamba2, c.mlp_activation and c.rope from config.json, after the
// generic fields (num_layers among them) are parsed.
absl::Status parse_nemotron_h(const nlohmann::json& config, const std::string& where, ModelConfig& c);

}  // namespace baton
