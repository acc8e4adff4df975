#include "engine/model/weights.h"

#include <set>

#include "common/status.h"
#include "engine/model/weight_loader.h"
#include "spdlog/spdlog.h"

namespace baton {

bool is_ignorable_tensor(const std::string& name) {
  return name.ends_with("rotary_emb.inv_freq");
}

absl::StatusOr<ModelWeights> ModelWeights::load(const ModelConfig& c, std::shared_ptr<const Checkpoint> ckpt,
                                                Backend& backend, const WeightLoadOptions& options) {
  if (options.dtype && *options.dtype != DType::kF32 && *options.dtype != DType::kBF16 && *options.dtype != DType::kF16) {
    return absl::InvalidArgumentError(str_cat("weight dtype override must be F32, BF16 or F16, got ", dtype_name(*options.dtype)));
  }
  if (c.has_experts() && !backend.runs_moe()) {
    return absl::UnimplementedError(str_cat(c.architecture_name, ": ", backend.describe(),
                                            " has no mixture-of-experts kernels yet; run this model on the CPU backend"));
  }
  if (c.num_recurrent_layers() > 0 && !backend.runs_linear_attention()) {
    return absl::UnimplementedError(str_cat(c.architecture_name, ": ", backend.describe(),
                                            " has no linear-attention kernels yet; run this model on the CPU backend"));
  }
  if ((c.has_mamba2_layers() || c.mlp_activation == MlpActivation::kReluSquared) && !backend.runs_mamba2()) {
    return absl::UnimplementedError(str_cat(c.architecture_name, ": ", backend.describe(),
                                            " has no Mamba-2 kernels yet; run this model on the CPU backend"));
  }
  ModelWeights w;
  w.checkpoint_ = ckpt;
  WeightLoader load(c.architecture_name, *ckpt, backend, options, &w.owned_);
  const std::int64_t h = c.hidden_size;
  // Nemotron-H keeps its decoder under backbone.* with its own names; the others under
  // weights_prefix (model., or model.language_model. for a multimodal checkpoint's text model).
  const bool nemotron = c.architecture == Architecture::kNemotronH;
  const std::string& p = c.weights_prefix;
  const std::string embed = nemotron ? "backbone.embeddings.weight" : p + "embed_tokens.weight";
  const std::string final_norm = nemotron ? "backbone.norm_f.weight" : p + "norm.weight";
  BATON_ASSIGN_OR_RETURN(w.embed, load.matrix(embed, c.vocab_size, h, "[vocab_size, hidden_size]"));
  BATON_ASSIGN_OR_RETURN(w.final_norm, load.norm(c, final_norm, h, "[hidden_size]"));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    BATON_ASSIGN_OR_RETURN(w.lm_head, load.matrix("lm_head.weight", c.vocab_size, h, "[vocab_size, hidden_size]"));
  }
  // Packed for linear() (a copy of its own when tied: the embedding lookup reads rows).
  BATON_ASSIGN_OR_RETURN(w.lm_head, load.for_linear(w.lm_head));
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    if (nemotron) {
      BATON_ASSIGN_OR_RETURN(LayerWeights l, load.nemotron_h_block(c, str_cat("backbone.layers.", i, "."), i));
      w.layers.push_back(l);
      continue;
    }
    WeightLoader::LayerSpec spec;
    spec.experts = c.sparse_mlp.at(static_cast<std::size_t>(i));
    spec.linear_attention = c.is_linear_attention(i);
    BATON_ASSIGN_OR_RETURN(LayerWeights l, load.layer(c, str_cat(p, "layers.", i, "."), spec));
    w.layers.push_back(l);
  }
  const std::set<std::string> used = load.used();
  std::vector<std::string> unused;
  for (const std::string& name : ckpt->names()) {
    // Qwen3-Next and Qwen3.5 checkpoints carry their MTP module (mtp.*) beside the target: the
    // MTP proposer's. A multimodal checkpoint's vision tower (model.visual.*) is not run.
    const bool next = c.architecture == Architecture::kQwen3Next || c.architecture == Architecture::kQwen35;
    const bool mtp = next && name.starts_with("mtp.");
    const bool vision = c.weights_prefix == "model.language_model." && name.starts_with("model.visual.");
    if (!used.contains(name) && !is_ignorable_tensor(name) && !mtp && !vision &&
        !(c.tie_word_embeddings && name == "lm_head.weight")) {
      unused.push_back(name);
    }
  }
  if (!unused.empty()) {
    spdlog::warn("{}: {} tensors are not used by {} (first: {})", ckpt->model_dir(), unused.size(),
                 c.architecture_name, unused.front());
  }
  return w;
}

std::int64_t ModelWeights::bytes_per_decode_step() const {
  auto bytes = [](const TensorView& v) {
    return v.empty() ? 0 : v.numel() * static_cast<std::int64_t>(dtype_size(v.dtype));
  };
  std::int64_t total = bytes(lm_head) + bytes(final_norm);
  for (const LayerWeights& l : layers) {
    total += bytes(l.input_norm) + bytes(l.qkv) + bytes(l.qkv_bias) + bytes(l.q_norm) + bytes(l.k_norm) +
             bytes(l.o_proj) + bytes(l.o_bias) + bytes(l.post_norm) + bytes(l.gate_up) + bytes(l.down) + bytes(l.router) +
             bytes(l.in_proj) + bytes(l.conv) + bytes(l.a_log) + bytes(l.dt_bias) + bytes(l.gated_norm) +
             bytes(l.out_proj) + bytes(l.conv_bias) + bytes(l.d_skip) + bytes(l.up);
    // A token reads top_k experts of a MoE layer (a batch may read more: the floor is one token's).
    if (!l.experts.gate_up.empty()) {
      total += l.experts.top_k * (bytes(l.experts.gate_up.front()) + bytes(l.experts.down.front())) +
               bytes(l.experts.shared_gate_up) + bytes(l.experts.shared_down) + bytes(l.experts.shared_gate);
    }
  }
  return total;
}

std::string ModelWeights::matrix_dtype() const {
  std::set<std::string> names;
  names.insert(std::string(dtype_name(lm_head.dtype)));
  for (const LayerWeights& l : layers) {
    for (const TensorView* v : {&l.qkv, &l.o_proj, &l.gate_up, &l.up, &l.down, &l.router, &l.in_proj, &l.out_proj}) {
      if (!v->empty()) names.insert(std::string(dtype_name(v->dtype)));
    }
    for (const TensorView& v : l.experts.gate_up) names.insert(std::string(dtype_name(v.dtype)));
  }
  return names.size() == 1 ? *names.begin() : std::string("mixed");
}

}  // namespace baton
