// WeightLoader's Nemotron-H blocks: backbone.layers.N.norm and the block's one sublayer under
// backbone.layers.N.mixer — a Mamba-2 mixer, attention (q/k/v/o_proj, biases per attention_bias)
// or the relu² MLP (up_proj, down_proj). Shapes as NemotronHForCausalLM stores them.
#include "common/status.h"
#include "engine/model/weight_loader.h"

namespace baton {

absl::StatusOr<LayerWeights> WeightLoader::nemotron_h_block(const ModelConfig& c, const std::string& p,
                                                            std::int32_t layer) {
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
  LayerWeights l;
  BATON_ASSIGN_OR_RETURN(l.input_norm, norm(c, p + "norm.weight", h, "[hidden_size]"));
  const std::string m = p + "mixer.";
  switch (c.mixer(layer)) {
    case MixerKind::kMamba2:
      BATON_RETURN_IF_ERROR(mamba2(c, m, l));
      break;
    case MixerKind::kAttention: {
      const std::int64_t q = c.q_size(), kv = c.kv_size();
      BATON_ASSIGN_OR_RETURN(l.qkv, fused({{m + "q_proj.weight", q}, {m + "k_proj.weight", kv}, {m + "v_proj.weight", kv}},
                                          h, "[heads * head_dim, hidden_size] (k, v: kv_heads * head_dim)"));
      BATON_ASSIGN_OR_RETURN(l.qkv, for_linear(l.qkv));
      if (c.qkv_bias) {
        BATON_ASSIGN_OR_RETURN(l.qkv_bias, vector_f32({{m + "q_proj.bias", q}, {m + "k_proj.bias", kv},
                                                       {m + "v_proj.bias", kv}},
                                                      "[heads * head_dim] (k, v: kv_heads * head_dim)"));
      }
      BATON_ASSIGN_OR_RETURN(l.o_proj, matrix(m + "o_proj.weight", h, q, "[hidden_size, heads * head_dim]"));
      BATON_ASSIGN_OR_RETURN(l.o_proj, for_linear(l.o_proj));
      if (c.o_bias) {
        BATON_ASSIGN_OR_RETURN(l.o_bias, vector_f32({{m + "o_proj.bias", h}}, "[hidden_size]"));
      }
      break;
    }
    case MixerKind::kNone: {
      l.mixer = MixerKind::kNone;
      BATON_ASSIGN_OR_RETURN(l.up, matrix(m + "up_proj.weight", inter, h, "[intermediate_size, hidden_size]"));
      BATON_ASSIGN_OR_RETURN(l.up, for_linear(l.up));
      BATON_ASSIGN_OR_RETURN(l.down, matrix(m + "down_proj.weight", h, inter, "[hidden_size, intermediate_size]"));
      BATON_ASSIGN_OR_RETURN(l.down, for_linear(l.down));
      break;
    }
    case MixerKind::kLinearAttention:
      return absl::InternalError(str_cat(p, ": Nemotron-H has no linear-attention blocks"));
  }
  return l;
}

absl::Status WeightLoader::mamba2(const ModelConfig& c, const std::string& m, LayerWeights& l) {
  const Mamba2Config& mc = c.mamba2;
  const std::int64_t h = c.hidden_size, channels = mc.conv_channels(), taps = mc.conv_kernel, heads = mc.num_heads;
  BATON_ASSIGN_OR_RETURN(l.in_proj, matrix(m + "in_proj.weight", mc.projection_width(), h,
                                           "[2 inner + 2 n_groups * ssm_state_size + mamba_num_heads, hidden_size]"));
  BATON_ASSIGN_OR_RETURN(l.in_proj, for_linear(l.in_proj));
  BATON_ASSIGN_OR_RETURN(const TensorInfo* conv, get(m + "conv1d.weight", {channels, 1, taps},
                                                     "[inner + 2 n_groups * ssm_state_size, 1, conv_kernel]"));
  BATON_ASSIGN_OR_RETURN(l.conv, upload({{conv, 0, channels}}, DType::kF32, taps));
  if (mc.conv_bias) {
    BATON_ASSIGN_OR_RETURN(l.conv_bias, vector_f32({{m + "conv1d.bias", channels}},
                                                   "[inner + 2 n_groups * ssm_state_size]"));
  }
  BATON_ASSIGN_OR_RETURN(l.a_log, vector_f32({{m + "A_log", heads}}, "[mamba_num_heads]"));
  BATON_ASSIGN_OR_RETURN(l.dt_bias, vector_f32({{m + "dt_bias", heads}}, "[mamba_num_heads]"));
  BATON_ASSIGN_OR_RETURN(l.d_skip, vector_f32({{m + "D", heads}}, "[mamba_num_heads]"));
  BATON_ASSIGN_OR_RETURN(l.gated_norm, vector_f32({{m + "norm.weight", mc.inner()}}, "[mamba_num_heads * mamba_head_dim]"));
  BATON_ASSIGN_OR_RETURN(l.out_proj, matrix(m + "out_proj.weight", h, mc.inner(),
                                            "[hidden_size, mamba_num_heads * mamba_head_dim]"));
  BATON_ASSIGN_OR_RETURN(l.out_proj, for_linear(l.out_proj));
  l.mixer = MixerKind::kMamba2;
  return absl::OkStatus();
}

}  // namespace baton
