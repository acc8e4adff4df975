#include "engine/model/config.h"

#include <cctype>
#include <filesystem>

#include "common/status.h"
#include "common/text_file.h"
#include "engine/model/config_fields.h"
#include "kernels/backend.h"
#include "engine/model/config_nemotron_h.h"
#include "engine/model/config_qwen3_5.h"
#include "nlohmann/json.hpp"
#include "xxhash.h"

namespace baton {
namespace {

using nlohmann::json;

// An int or a list of ints (eos_token_id is either in Hugging Face files).
absl::Status append_token_ids(const json& j, const std::string& where, const std::string& key,
                              std::vector<std::int32_t>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  auto add = [&](const json& v) -> absl::Status {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
      return field_error(where, key, str_cat("must hold non-negative token ids, got ", it->dump()));
    }
    const auto id = static_cast<std::int32_t>(v.get<std::int64_t>());
    if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
    return absl::OkStatus();
  };
  if (it->is_array()) {
    for (const json& v : *it) BATON_RETURN_IF_ERROR(add(v));
    return absl::OkStatus();
  }
  return add(*it);
}

absl::StatusOr<RopeScaling> parse_rope_scaling(const json& config, const std::string& where) {
  RopeScaling rs;
  auto it = config.find("rope_scaling");
  if (it == config.end() || it->is_null()) return rs;
  if (!it->is_object()) return field_error(where, "rope_scaling", "must be an object or null");
  const json& r = *it;
  std::string type;
  if (auto t = r.find("rope_type"); t != r.end() && t->is_string()) {
    type = t->get<std::string>();
  } else if (auto t2 = r.find("type"); t2 != r.end() && t2->is_string()) {
    type = t2->get<std::string>();  // the legacy key
  } else {
    return field_error(where, "rope_scaling", "has no `rope_type` (or legacy `type`)");
  }
  const std::string w = where + " rope_scaling";
  if (type == "default") return rs;
  BATON_ASSIGN_OR_RETURN(rs.factor, get_number(r, w, "factor", 1.0));
  if (rs.factor <= 0) return field_error(w, "factor", "must be positive");
  if (type == "linear") {
    rs.type = RopeScaling::Type::kLinear;
    return rs;
  }
  if (type == "llama3") {
    rs.type = RopeScaling::Type::kLlama3;
    BATON_ASSIGN_OR_RETURN(rs.low_freq_factor, get_number(r, w, "low_freq_factor", 1.0));
    BATON_ASSIGN_OR_RETURN(rs.high_freq_factor, get_number(r, w, "high_freq_factor", 4.0));
    BATON_ASSIGN_OR_RETURN(rs.original_max_position_embeddings,
                           get_number(r, w, "original_max_position_embeddings", 8192));
    if (rs.high_freq_factor <= rs.low_freq_factor) {
      return field_error(w, "high_freq_factor", "must be greater than low_freq_factor");
    }
    return rs;
  }
  return field_error(where, "rope_scaling",
                     str_cat("has rope_type \"", type, "\", which Baton does not support (supported: default, linear, llama3)"));
}

absl::StatusOr<std::optional<DType>> parse_torch_dtype(const json& config, const std::string& where) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    const std::string s = it->is_string() ? it->get<std::string>() : "";
    if (s == "float32") return std::optional<DType>(DType::kF32);
    if (s == "bfloat16") return std::optional<DType>(DType::kBF16);
    if (s == "float16") return std::optional<DType>(DType::kF16);
    return field_error(where, key, str_cat("is ", it->dump(), "; supported: float32, bfloat16, float16"));
  }
  return std::optional<DType>();
}

// The experts of Qwen3-MoE and Qwen2-MoE (their configs' keys and defaults); every other
// architecture must have none.
absl::Status parse_experts(const json& config, const std::string& where, ModelConfig& c) {
  c.sparse_mlp.assign(static_cast<std::size_t>(c.num_layers), false);
  const bool qwen2 = c.architecture == Architecture::kQwen2Moe;
  const bool next = c.architecture == Architecture::kQwen3Next;
  // Nemotron-H's experts sit in "E" blocks, which parse_nemotron_h refuses; its configs may carry
  // the MoE keys' defaults regardless.
  if (c.architecture == Architecture::kNemotronH) return absl::OkStatus();
  if (c.architecture != Architecture::kQwen3Moe && !qwen2 && !next) {
    for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) {
      if (auto it = config.find(key); it != config.end() && it->is_number() && it->get<double>() > 0) {
        return field_error(where, key, str_cat("is set, but ", c.architecture_name, " has no mixture of experts"));
      }
    }
    return absl::OkStatus();
  }
  if (qwen2 || next) {  // Qwen2MoeConfig's and Qwen3NextConfig's defaults
    BATON_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                           get_positive_int(config, where, "shared_expert_intermediate_size", next ? 512 : 5632));
  } else {
    for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts"}) {
      if (auto it = config.find(key); it != config.end() && it->is_number() && it->get<double>() > 0) {
        return field_error(where, key, "is set, but Qwen3MoeForCausalLM has no shared expert");
      }
    }
  }
  BATON_ASSIGN_OR_RETURN(c.num_experts, get_positive_int(config, where, "num_experts", next ? 512 : qwen2 ? 60 : 128));
  BATON_ASSIGN_OR_RETURN(c.num_experts_per_tok,
                         get_positive_int(config, where, "num_experts_per_tok", next ? 10 : qwen2 ? 4 : 8));
  BATON_ASSIGN_OR_RETURN(c.moe_intermediate_size,
                         get_positive_int(config, where, "moe_intermediate_size", next ? 512 : qwen2 ? 1408 : 768));
  BATON_ASSIGN_OR_RETURN(c.norm_topk_prob, get_bool(config, where, "norm_topk_prob", next));
  BATON_ASSIGN_OR_RETURN(const std::int32_t step, get_positive_int(config, where, "decoder_sparse_step", 1));
  if (c.num_experts_per_tok > c.num_experts) {
    return field_error(where, "num_experts_per_tok",
                       str_cat("(", c.num_experts_per_tok, ") is more than num_experts (", c.num_experts, ")"));
  }
  std::vector<bool> dense_only(static_cast<std::size_t>(c.num_layers), false);
  if (auto it = config.find("mlp_only_layers"); it != config.end() && !it->is_null()) {
    if (!it->is_array()) return field_error(where, "mlp_only_layers", "must be a list of layer indices");
    for (const json& i : *it) {
      if (!i.is_number_integer() || i.get<std::int64_t>() < 0 || i.get<std::int64_t>() >= c.num_layers) {
        return field_error(where, "mlp_only_layers", str_cat("holds ", i.dump(), "; layers are 0 to ", c.num_layers - 1));
      }
      dense_only[static_cast<std::size_t>(i.get<std::int64_t>())] = true;
    }
  }
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    c.sparse_mlp[static_cast<std::size_t>(i)] = !dense_only[static_cast<std::size_t>(i)] && (i + 1) % step == 0;
  }
  return absl::OkStatus();
}

// Qwen3-Next's (and Qwen3.5's) layer mix (`layer_types`, else every full_attention_interval-th
// layer is full attention), its linear-attention shapes and its partial rotary (Qwen3NextConfig's
// defaults; rope_parameters' when the config has them).
absl::Status parse_hybrid(const json& config, const std::string& where, ModelConfig& c) {
  c.mixers.assign(static_cast<std::size_t>(c.num_layers), MixerKind::kAttention);
  if (c.architecture != Architecture::kQwen3Next && c.architecture != Architecture::kQwen35) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(c.attn_output_gate, get_bool(config, where, "attn_output_gate", true));
  if (!c.attn_output_gate) return field_error(where, "attn_output_gate", "false is not supported (the gate is part of these layers)");
  c.zero_centered_norms = true;
  if (auto lt = config.find("layer_types"); lt != config.end() && !lt->is_null()) {
    if (!lt->is_array() || static_cast<std::int32_t>(lt->size()) != c.num_layers) {
      return field_error(where, "layer_types", str_cat("must list one type for each of the ", c.num_layers, " layers"));
    }
    for (std::size_t i = 0; i < lt->size(); ++i) {
      const std::string t = (*lt)[i].is_string() ? (*lt)[i].get<std::string>() : "";
      if (t == "linear_attention") {
        c.mixers[i] = MixerKind::kLinearAttention;
      } else if (t != "full_attention") {
        return field_error(where, "layer_types",
                           str_cat("entry ", i, " is ", (*lt)[i].dump(), "; expected \"linear_attention\" or \"full_attention\""));
      }
    }
  } else {
    BATON_ASSIGN_OR_RETURN(const std::int32_t interval, get_positive_int(config, where, "full_attention_interval", 4));
    for (std::int32_t i = 0; i < c.num_layers; ++i) {
      if ((i + 1) % interval != 0) c.mixers[static_cast<std::size_t>(i)] = MixerKind::kLinearAttention;
    }
  }
  LinearAttentionConfig& l = c.linear_attention;
  BATON_ASSIGN_OR_RETURN(l.num_key_heads, get_positive_int(config, where, "linear_num_key_heads", 16));
  BATON_ASSIGN_OR_RETURN(l.num_value_heads, get_positive_int(config, where, "linear_num_value_heads", 32));
  BATON_ASSIGN_OR_RETURN(l.key_head_dim, get_positive_int(config, where, "linear_key_head_dim", 128));
  BATON_ASSIGN_OR_RETURN(l.value_head_dim, get_positive_int(config, where, "linear_value_head_dim", 128));
  BATON_ASSIGN_OR_RETURN(l.conv_kernel, get_positive_int(config, where, "linear_conv_kernel_dim", 4));
  BATON_RETURN_IF_ERROR(check_at_most(where, "linear_conv_kernel_dim", l.conv_kernel, kMaxRecurrentConvKernel));
  BATON_RETURN_IF_ERROR(check_at_most(where, "linear_key_head_dim", l.key_head_dim, kMaxRecurrentStateColumn));
  BATON_RETURN_IF_ERROR(check_at_most(where, "linear_value_head_dim", l.value_head_dim, kMaxRecurrentHeadWidth));
  BATON_RETURN_IF_ERROR(check_at_most(where, "linear_num_value_heads", l.num_value_heads, 4096));
  if (l.num_value_heads % l.num_key_heads != 0) {
    return field_error(where, "linear_num_key_heads",
                       str_cat("(", l.num_key_heads, ") must divide linear_num_value_heads (", l.num_value_heads, ")"));
  }
  BATON_ASSIGN_OR_RETURN(const double factor,
                         get_number(rope_parameters_or(config, "partial_rotary_factor"), where, "partial_rotary_factor", 0.25));
  // int(), as the reference rounds; only for a factor in (0, 1], so the cast cannot overflow.
  const bool in_range = factor > 0 && factor <= 1;
  const std::int32_t rotary = in_range ? static_cast<std::int32_t>(c.head_dim * factor) : 0;
  if (!in_range || rotary < 2 || rotary % 2 != 0) {
    return field_error(where, "partial_rotary_factor",
                       str_cat("(", factor, ") must leave an even number of rotated dims of head_dim ", c.head_dim,
                               ", got ", rotary));
  }
  c.rotary_dim = rotary;
  return absl::OkStatus();
}

}  // namespace

std::int32_t ModelConfig::num_attention_layers() const {
  std::int32_t n = 0;
  for (std::int32_t i = 0; i < num_layers; ++i) n += is_attention(i) ? 1 : 0;
  return n;
}

std::int32_t ModelConfig::num_recurrent_layers() const {
  std::int32_t n = 0;
  for (std::int32_t i = 0; i < num_layers; ++i) n += is_recurrent(i) ? 1 : 0;
  return n;
}

bool ModelConfig::has_mamba2_layers() const {
  return std::find(mixers.begin(), mixers.end(), MixerKind::kMamba2) != mixers.end();
}

std::int64_t ModelConfig::conv_state_floats() const {
  return has_mamba2_layers() ? mamba2.conv_state_floats() : linear_attention.conv_state_floats();
}

std::int64_t ModelConfig::recurrent_state_floats() const {
  return has_mamba2_layers() ? mamba2.recurrent_state_floats() : linear_attention.recurrent_state_floats();
}

absl::StatusOr<ModelConfig> ModelConfig::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  std::error_code ec;
  const fs::file_status status = fs::status(model_dir, ec);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(str_cat(model_dir, ": no such directory (expected a Hugging Face model directory)"));
  }
  if (ec) return absl::PermissionDeniedError(str_cat(model_dir, ": cannot be read (", ec.message(), ")"));
  if (!fs::is_directory(status)) {
    return absl::NotFoundError(str_cat(model_dir, ": not a directory (expected a Hugging Face model directory)"));
  }
  BATON_ASSIGN_OR_RETURN(const std::string text, read_text_file(config_path));
  const json config = json::parse(standardize_python_json(text), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError(str_cat(config_path, ": not valid JSON"));
  const std::string gen_path = (fs::path(model_dir) / "generation_config.json").string();
  json gen;
  bool have_gen = false;
  if (fs::exists(gen_path)) {
    BATON_ASSIGN_OR_RETURN(const std::string gen_text, read_text_file(gen_path));
    gen = json::parse(gen_text, nullptr, false);
    if (gen.is_discarded() || !gen.is_object()) {
      return absl::InvalidArgumentError(str_cat(gen_path, ": not a valid JSON object"));
    }
    have_gen = true;
  }
  if (have_gen) {
    // Check generation_config.json's token ids here so an error names that file.
    std::vector<std::int32_t> ignored;
    BATON_RETURN_IF_ERROR(append_token_ids(gen, gen_path, "eos_token_id", &ignored));
    BATON_RETURN_IF_ERROR(append_token_ids(gen, gen_path, "bos_token_id", &ignored));
  }
  return parse(config, have_gen ? &gen : nullptr, config_path);
}

bool has_recurrent_layers_in(const json& config) {
  if (!config.is_object()) return false;
  const auto names_recurrent = [](const std::string& s) {
    for (const char* word : {"linear_attention", "mamba", "recurrent", "ssm", "rwkv", "lightning"}) {
      std::string lower = s;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (lower.find(word) != std::string::npos) return true;
    }
    return false;
  };
  for (const char* key : {"layer_types", "layers_block_type"}) {
    if (auto it = config.find(key); it != config.end() && it->is_array()) {
      for (const json& t : *it) {
        if (t.is_string() && names_recurrent(t.get<std::string>())) return true;
      }
    }
  }
  if (auto it = config.find("hybrid_override_pattern"); it != config.end() && it->is_string()) {
    if (it->get<std::string>().find('M') != std::string::npos) return true;
  }
  if (auto it = config.find("architectures"); it != config.end() && it->is_array()) {
    for (const json& a : *it) {
      if (!a.is_string()) continue;
      const std::string name = a.get<std::string>();
      for (const char* family : {"Mamba", "Jamba", "Zamba", "FalconH1", "RecurrentGemma", "Qwen3Next", "Qwen3_5", "NemotronH",
                                 "Rwkv", "MiniMaxM1", "MiniMaxText01", "Plamo2", "GraniteMoeHybrid", "Lfm2"}) {
        if (name.find(family) != std::string::npos) return true;
      }
    }
  }
  return false;
}

absl::StatusOr<ModelConfig> ModelConfig::parse(const json& config, const json* gen, const std::string& where) {
  if (!config.is_object()) return absl::InvalidArgumentError(str_cat(where, ": expected a JSON object"));
  ModelConfig c;
  c.has_recurrent_layers = has_recurrent_layers_in(config);
  const std::string canonical = config.dump();  // std::map-backed: keys sorted, so the dump is canonical
  c.identity = XXH3_64bits(canonical.data(), canonical.size());
  auto arch = config.find("architectures");
  if (arch == config.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
    return field_error(where, "architectures", "must be a non-empty list of names, e.g. [\"LlamaForCausalLM\"]");
  }
  c.architecture_name = (*arch)[0].get<std::string>();
  if (c.architecture_name == "Qwen3_5ForConditionalGeneration") return parse_qwen3_5_multimodal(config, gen, where);
  if (c.architecture_name == "LlamaForCausalLM") {
    c.architecture = Architecture::kLlama;
  } else if (c.architecture_name == "MistralForCausalLM") {
    c.architecture = Architecture::kMistral;
  } else if (c.architecture_name == "Qwen2ForCausalLM") {
    c.architecture = Architecture::kQwen2;
  } else if (c.architecture_name == "Qwen3ForCausalLM") {
    c.architecture = Architecture::kQwen3;
  } else if (c.architecture_name == "Qwen3MoeForCausalLM") {
    c.architecture = Architecture::kQwen3Moe;
  } else if (c.architecture_name == "Qwen2MoeForCausalLM") {
    c.architecture = Architecture::kQwen2Moe;
  } else if (c.architecture_name == "Qwen3NextForCausalLM") {
    c.architecture = Architecture::kQwen3Next;
  } else if (c.architecture_name == "Qwen3_5ForCausalLM") {
    c.architecture = Architecture::kQwen35;
  } else if (c.architecture_name == "NemotronHForCausalLM") {
    c.architecture = Architecture::kNemotronH;
  } else {
    if (c.has_recurrent_layers) {
      return absl::UnimplementedError(str_cat(where, ": architecture \"", c.architecture_name,
                                              "\" has recurrent layers; hybrid recurrent models are not supported yet"));
    }
    return absl::UnimplementedError(str_cat(where, ": architecture \"", c.architecture_name,
                                            "\" is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                                            "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                                            "Qwen2MoeForCausalLM, Qwen3NextForCausalLM, Qwen3_5ForCausalLM, "
                                            "Qwen3_5ForConditionalGeneration, NemotronHForCausalLM)"));
  }
  if (config.contains("quantization_config")) {
    return field_error(where, "quantization_config", "is present: quantized checkpoints are not supported");
  }
  BATON_ASSIGN_OR_RETURN(c.hidden_size, get_positive_int(config, where, "hidden_size"));
  BATON_ASSIGN_OR_RETURN(c.intermediate_size, get_positive_int(config, where, "intermediate_size"));
  const bool nemotron = c.architecture == Architecture::kNemotronH;
  std::optional<std::int32_t> layers_fallback;
  if (nemotron) {  // newer Nemotron-H configs derive the layer count from the block pattern
    BATON_ASSIGN_OR_RETURN(layers_fallback, nemotron_h_num_layers(config, where));
  }
  BATON_ASSIGN_OR_RETURN(c.num_layers, get_positive_int(config, where, "num_hidden_layers", layers_fallback));
  BATON_ASSIGN_OR_RETURN(c.num_heads, get_positive_int(config, where, "num_attention_heads"));
  BATON_ASSIGN_OR_RETURN(c.num_kv_heads, get_positive_int(config, where, "num_key_value_heads", c.num_heads));
  BATON_ASSIGN_OR_RETURN(c.vocab_size, get_positive_int(config, where, "vocab_size"));
  BATON_ASSIGN_OR_RETURN(c.max_position_embeddings,
                         get_positive_int(config, where, "max_position_embeddings", nemotron ? 4096 : 2048));
  // Qwen3's own default head_dim is 128 (Qwen3-Next's 256); the others derive it from hidden_size.
  // Qwen3.5's text model is Qwen3-Next's layer stack (with dense MLPs): the same keys and defaults.
  const bool next = c.architecture == Architecture::kQwen3Next || c.architecture == Architecture::kQwen35;
  const bool qwen3 = c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kQwen3Moe || next;
  const bool head_dim_given = config.contains("head_dim") && !config["head_dim"].is_null();
  std::int32_t nemotron_head_dim = 0;
  if (nemotron) {
    BATON_ASSIGN_OR_RETURN(nemotron_head_dim, nemotron_h_head_dim(config, where));
  }
  if (nemotron_head_dim > 0) {
    c.head_dim = nemotron_head_dim;
  } else if (head_dim_given || qwen3) {
    BATON_ASSIGN_OR_RETURN(c.head_dim, get_positive_int(config, where, "head_dim", next ? 256 : 128));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return field_error(where, "num_attention_heads",
                         str_cat("(", c.num_heads, ") must divide hidden_size (", c.hidden_size, ") when head_dim is absent"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) return field_error(where, "head_dim", str_cat("must be even for RoPE, got ", c.head_dim));
  if (c.num_heads % c.num_kv_heads != 0) {
    return field_error(where, "num_key_value_heads",
                       str_cat("(", c.num_kv_heads, ") must divide num_attention_heads (", c.num_heads, ")"));
  }
  // Nemotron-H names its RMSNorm epsilon layer_norm_epsilon.
  const char* eps_key = nemotron && config.contains("layer_norm_epsilon") ? "layer_norm_epsilon" : "rms_norm_eps";
  BATON_ASSIGN_OR_RETURN(const double eps, get_number(config, where, eps_key, nemotron ? 1e-5 : 1e-6));
  if (!(eps > 0)) return field_error(where, eps_key, "must be positive");
  c.rms_norm_eps = static_cast<float>(eps);
  BATON_RETURN_IF_ERROR(check_rope_parameters(config, where));
  BATON_ASSIGN_OR_RETURN(c.rope_theta, get_number(rope_parameters_or(config, "rope_theta"), where, "rope_theta", 10000.0));
  if (!(c.rope_theta > 0)) return field_error(where, "rope_theta", "must be positive");
  BATON_ASSIGN_OR_RETURN(c.rope_scaling, parse_rope_scaling(config, where));
  c.rotary_dim = c.head_dim;
  if (const json& r = rope_parameters_or(config, "partial_rotary_factor");
      !next && r.contains("partial_rotary_factor") && r["partial_rotary_factor"] != 1.0) {
    return field_error(where, "partial_rotary_factor",
                       str_cat("other than 1.0 is not supported on ", c.architecture_name));
  }
  // Nemotron-H's MLP activation is mlp_hidden_act (config_nemotron_h.cc checks it).
  const std::string act = config.value("hidden_act", std::string("silu"));
  if (act != "silu" && !nemotron) {
    return field_error(where, "hidden_act", str_cat("is \"", act, "\"; only \"silu\" is supported"));
  }
  BATON_ASSIGN_OR_RETURN(const bool mlp_bias, get_bool(config, where, "mlp_bias", false));
  if (mlp_bias) return field_error(where, "mlp_bias", "true is not supported");
  BATON_ASSIGN_OR_RETURN(c.tie_word_embeddings, get_bool(config, where, "tie_word_embeddings", false));
  BATON_ASSIGN_OR_RETURN(const bool attention_bias, get_bool(config, where, "attention_bias", false));
  switch (c.architecture) {
    case Architecture::kLlama:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
    case Architecture::kNemotronH:
      c.qkv_bias = attention_bias;
      c.o_bias = attention_bias;
      break;
    case Architecture::kQwen2:
    case Architecture::kQwen2Moe:
      c.qkv_bias = true;
      break;
    case Architecture::kMistral:
      break;
    case Architecture::kQwen3Next:
    case Architecture::kQwen35:
      if (attention_bias) {
        return field_error(where, "attention_bias", str_cat("true is not supported on ", c.architecture_name));
      }
      break;
  }
  c.qk_norm = qwen3;
  BATON_RETURN_IF_ERROR(parse_experts(config, where, c));
  BATON_RETURN_IF_ERROR(parse_hybrid(config, where, c));

  // Sliding window, per layer.
  c.sliding_window.assign(static_cast<std::size_t>(c.num_layers), 0);
  if (c.architecture == Architecture::kMistral) {
    auto it = config.find("sliding_window");
    if (it == config.end()) {
      c.sliding_window.assign(c.sliding_window.size(), 4096);  // MistralConfig's default
    } else if (!it->is_null()) {
      BATON_ASSIGN_OR_RETURN(const std::int32_t w, get_positive_int(config, where, "sliding_window"));
      c.sliding_window.assign(c.sliding_window.size(), w);
    }
  } else if ((c.architecture == Architecture::kQwen2 || c.architecture == Architecture::kQwen2Moe || qwen3) && !next) {
    if (auto lt = config.find("layer_types"); lt != config.end() && lt->is_array()) {
      if (static_cast<std::int32_t>(lt->size()) != c.num_layers) {
        return field_error(where, "layer_types", str_cat("has ", lt->size(), " entries for ", c.num_layers, " layers"));
      }
      std::int32_t w = 0;
      for (std::size_t i = 0; i < lt->size(); ++i) {
        const std::string t = (*lt)[i].is_string() ? (*lt)[i].get<std::string>() : "";
        if (t == "sliding_attention") {
          if (w == 0) {
            BATON_ASSIGN_OR_RETURN(w, get_positive_int(config, where, "sliding_window"));
          }
          c.sliding_window[i] = w;
        } else if (t != "full_attention") {
          return field_error(where, "layer_types", str_cat("entry ", i, " is ", (*lt)[i].dump()));
        }
      }
    } else {
      BATON_ASSIGN_OR_RETURN(const bool use_sw, get_bool(config, where, "use_sliding_window", false));
      if (use_sw) {
        BATON_ASSIGN_OR_RETURN(const std::int32_t w, get_positive_int(config, where, "sliding_window", 4096));
        BATON_ASSIGN_OR_RETURN(const std::int32_t first, get_positive_int(config, where, "max_window_layers", 28));
        for (std::int32_t i = first; i < c.num_layers; ++i) c.sliding_window[static_cast<std::size_t>(i)] = w;
      }
    }
  }

  if (nemotron) BATON_RETURN_IF_ERROR(parse_nemotron_h(config, where, c));

  BATON_ASSIGN_OR_RETURN(c.torch_dtype, parse_torch_dtype(config, where));
  std::vector<std::int32_t> bos;
  BATON_RETURN_IF_ERROR(append_token_ids(config, where, "bos_token_id", &bos));
  BATON_RETURN_IF_ERROR(append_token_ids(config, where, "eos_token_id", &c.eos_token_ids));
  if (gen != nullptr) {
    // generation_config.json is what generation uses; its ids come first.
    std::vector<std::int32_t> gen_eos, gen_bos;
    BATON_RETURN_IF_ERROR(append_token_ids(*gen, where, "eos_token_id", &gen_eos));
    BATON_RETURN_IF_ERROR(append_token_ids(*gen, where, "bos_token_id", &gen_bos));
    for (std::int32_t id : c.eos_token_ids) {
      if (std::find(gen_eos.begin(), gen_eos.end(), id) == gen_eos.end()) gen_eos.push_back(id);
    }
    c.eos_token_ids = gen_eos;
    if (!gen_bos.empty()) bos = gen_bos;
  }
  if (!bos.empty()) c.bos_token_id = bos.front();
  for (std::int32_t id : c.eos_token_ids) {
    if (id >= c.vocab_size) {
      return field_error(where, "eos_token_id", str_cat("holds ", id, ", outside the vocabulary of ", c.vocab_size));
    }
  }
  return c;
}

namespace {

// The weights a forward reads, counting `experts` experts in each layer that has them.
std::int64_t parameters(const ModelConfig& c, std::int64_t experts) {
  const std::int64_t h = c.hidden_size;
  const std::int64_t q_rows = c.q_size() * (c.attn_output_gate ? 2LL : 1LL);
  const std::int64_t attn = h * (q_rows + 2LL * c.kv_size()) + static_cast<std::int64_t>(c.q_size()) * h;
  // A Gated DeltaNet layer: its input projection, conv taps, A_log and dt_bias, norm and out_proj.
  const LinearAttentionConfig& la = c.linear_attention;
  const std::int64_t linear_attn = h * la.projection_width() + la.conv_channels() * la.conv_kernel +
                                   2LL * la.num_value_heads + la.value_head_dim + la.value_dim() * h;
  const std::int64_t dense_mlp = (c.mlp_activation == MlpActivation::kReluSquared ? 2LL : 3LL) * h * c.intermediate_size;
  // Every expert, the router's [num_experts, hidden] matrix, and a shared expert and its gate.
  const std::int64_t shared = c.shared_expert_intermediate_size;
  const std::int64_t experts_mlp = experts * 3LL * h * c.moe_intermediate_size + c.num_experts * h +
                                   (shared > 0 ? 3LL * h * shared + h : 0);
  // A Mamba-2 layer: in_proj, conv taps (and bias), A_log, D and dt_bias, the gated norm, out_proj.
  const Mamba2Config& m = c.mamba2;
  const std::int64_t mamba = h * m.projection_width() + m.conv_channels() * (m.conv_kernel + (m.conv_bias ? 1 : 0)) +
                             3LL * m.num_heads + m.inner() + m.inner() * h;
  std::int64_t layers = 0;
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    const auto l = static_cast<std::size_t>(i);
    const MixerKind kind = c.mixer(i);
    layers += kind == MixerKind::kLinearAttention ? linear_attn
              : kind == MixerKind::kMamba2        ? mamba
              : kind == MixerKind::kAttention     ? attn
                                                  : 0;
    if (c.layer_has_mlp(i)) layers += l < c.sparse_mlp.size() && c.sparse_mlp[l] ? experts_mlp : dense_mlp;
    layers += (kind != MixerKind::kNone && c.layer_has_mlp(i) ? 2 : 1) * h;  // the norms
  }
  const std::int64_t embed = static_cast<std::int64_t>(c.vocab_size) * h;
  return layers + embed * (c.tie_word_embeddings ? 1 : 2) + h;
}

}  // namespace

std::int64_t ModelConfig::num_parameters() const { return parameters(*this, num_experts); }

std::int64_t ModelConfig::num_active_parameters() const { return parameters(*this, num_experts_per_tok); }

}  // namespace baton
