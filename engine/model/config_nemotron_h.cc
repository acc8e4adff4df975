#include "engine/model/config_nemotron_h.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/status.h"
#include "engine/model/config_fields.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using nlohmann::json;

// One char per layer: M (Mamba-2), * (attention), - (MLP), E (MoE), from hybrid_override_pattern
// or layers_block_type (either vocabulary: mamba/attention or linear_attention/full_attention).
absl::StatusOr<std::string> block_pattern(const json& config, const std::string& where) {
  if (auto it = config.find("hybrid_override_pattern"); it != config.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty()) {
      return field_error(where, "hybrid_override_pattern", "must be a non-empty string of M, *, - and E");
    }
    const std::string p = it->get<std::string>();
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p[i] != 'M' && p[i] != '*' && p[i] != '-' && p[i] != 'E') {
        return field_error(where, "hybrid_override_pattern",
                           str_cat("has '", std::string(1, p[i]), "' at layer ", i, "; expected M, *, - or E"));
      }
    }
    return p;
  }
  for (const char* key : {"layers_block_type", "layer_types"}) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_array() || it->empty()) return field_error(where, key, "must be a non-empty list of block types");
    std::string p;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const std::string t = (*it)[i].is_string() ? (*it)[i].get<std::string>() : "";
      if (t == "mamba" || t == "linear_attention") {
        p += 'M';
      } else if (t == "attention" || t == "full_attention") {
        p += '*';
      } else if (t == "mlp") {
        p += '-';
      } else if (t == "moe") {
        p += 'E';
      } else {
        return field_error(where, key, str_cat("entry ", i, " is ", (*it)[i].dump(),
                                               "; expected mamba, attention, mlp or moe"));
      }
    }
    return p;
  }
  return field_error(where, "hybrid_override_pattern", "is missing (NemotronHForCausalLM needs its block pattern)");
}

absl::Status require_value(const json& config, const std::string& where, const std::string& key,
                           const std::string& fallback, const std::string& supported) {
  BATON_ASSIGN_OR_RETURN(const std::string v, get_string(config, where, key, fallback));
  if (v != supported) return field_error(where, key, str_cat("is \"", v, "\"; only \"", supported, "\" is supported"));
  return absl::OkStatus();
}

absl::Status require_false(const json& config, const std::string& where, const std::string& key, const char* what) {
  BATON_ASSIGN_OR_RETURN(const bool v, get_bool(config, where, key, false));
  if (v) return field_error(where, key, str_cat("true is not supported (", what, ")"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::int32_t> nemotron_h_num_layers(const json& config, const std::string& where) {
  BATON_ASSIGN_OR_RETURN(const std::string p, block_pattern(config, where));
  return static_cast<std::int32_t>(p.size());
}

absl::StatusOr<std::int32_t> nemotron_h_head_dim(const json& config, const std::string& where) {
  for (const char* key : {"head_dim", "attention_head_dim"}) {
    if (auto it = config.find(key); it != config.end() && !it->is_null()) return get_positive_int(config, where, key);
  }
  return 0;
}

absl::Status parse_nemotron_h(const json& config, const std::string& where, ModelConfig& c) {
  BATON_ASSIGN_OR_RETURN(const std::string pattern, block_pattern(config, where));
  if (static_cast<std::int32_t>(pattern.size()) != c.num_layers) {
    return field_error(where, "hybrid_override_pattern",
                       str_cat("has ", pattern.size(), " blocks but num_hidden_layers is ", c.num_layers));
  }
  const auto n = static_cast<std::size_t>(c.num_layers);
  c.mixers.assign(n, MixerKind::kAttention);
  c.has_mlp.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    switch (pattern[i]) {
      case 'M': c.mixers[i] = MixerKind::kMamba2; break;
      case '*': c.mixers[i] = MixerKind::kAttention; break;
      case '-':
        c.mixers[i] = MixerKind::kNone;
        c.has_mlp[i] = true;
        break;
      default:
        return field_error(where, "hybrid_override_pattern",
                           str_cat("has a mixture-of-experts block (E) at layer ", i,
                                   "; Nemotron-H's MoE blocks are not supported yet"));
    }
  }
  c.rope = false;
  c.mlp_activation = MlpActivation::kReluSquared;
  BATON_RETURN_IF_ERROR(require_value(config, where, "mlp_hidden_act", "relu2", "relu2"));
  BATON_RETURN_IF_ERROR(require_value(config, where, "mamba_hidden_act", "silu", "silu"));
  BATON_RETURN_IF_ERROR(require_false(config, where, "use_bias", "Mamba-2 in_proj/out_proj biases"));
  BATON_RETURN_IF_ERROR(require_false(config, where, "mamba_proj_bias", "Mamba-2 in_proj/out_proj biases"));
  Mamba2Config& m = c.mamba2;
  BATON_ASSIGN_OR_RETURN(m.num_heads, get_positive_int(config, where, "mamba_num_heads", 128));
  BATON_ASSIGN_OR_RETURN(m.head_dim, get_positive_int(config, where, "mamba_head_dim", 64));
  BATON_ASSIGN_OR_RETURN(m.state_size, get_positive_int(config, where, "ssm_state_size", 128));
  BATON_ASSIGN_OR_RETURN(m.num_groups, get_positive_int(config, where, "n_groups", 8));
  BATON_ASSIGN_OR_RETURN(m.conv_kernel, get_positive_int(config, where, "conv_kernel", 4));
  BATON_ASSIGN_OR_RETURN(m.conv_bias, get_bool(config, where, "use_conv_bias", true));
  BATON_RETURN_IF_ERROR(check_at_most(where, "conv_kernel", m.conv_kernel, kMaxRecurrentConvKernel));
  BATON_RETURN_IF_ERROR(check_at_most(where, "ssm_state_size", m.state_size, kMaxRecurrentStateColumn));
  BATON_RETURN_IF_ERROR(check_at_most(where, "mamba_head_dim", m.head_dim, kMaxRecurrentHeadWidth));
  if (m.num_heads % m.num_groups != 0) {
    return field_error(where, "n_groups", str_cat("(", m.num_groups, ") must divide mamba_num_heads (", m.num_heads, ")"));
  }
  // Keep every per-layer size an int32 element count well inside the address space.
  constexpr std::int64_t kMaxWidth = std::int64_t{1} << 24;
  if (m.projection_width() > kMaxWidth || m.recurrent_state_floats() > kMaxWidth) {
    return field_error(where, "mamba_num_heads",
                       str_cat("× mamba_head_dim × ssm_state_size gives a ", m.recurrent_state_floats(),
                               "-float state per layer; at most ", kMaxWidth, " is supported"));
  }
  m.dt_min = 0.0f;
  m.dt_max = std::numeric_limits<float>::infinity();
  if (auto it = config.find("time_step_limit"); it != config.end() && !it->is_null()) {
    const bool pair = it->is_array() && it->size() == 2 && (*it)[0].is_number() && (*it)[1].is_number();
    const double lo = pair ? (*it)[0].get<double>() : 0, hi = pair ? (*it)[1].get<double>() : 0;
    if (!pair || !(lo >= 0) || !(hi > lo)) {
      return field_error(where, "time_step_limit", str_cat("must be [min, max] with 0 <= min < max, got ", it->dump()));
    }
    m.dt_min = static_cast<float>(lo);
    m.dt_max = hi >= 1e30 ? std::numeric_limits<float>::infinity() : static_cast<float>(hi);
  }
  // NemotronHAttention passes sliding_window to every attention block.
  if (auto it = config.find("sliding_window"); it != config.end() && !it->is_null()) {
    BATON_ASSIGN_OR_RETURN(const std::int32_t w, get_positive_int(config, where, "sliding_window"));
    c.sliding_window.assign(n, w);
  }
  return absl::OkStatus();
}

}  // namespace baton
