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
  if (c.num_linear_attention_layers() > 0 && !backend.runs_linear_attention()) {
    return absl::UnimplementedError(str_cat(c.architecture_name, ": ", backend.describe(),
                                            " has no linear-attention kernels yet; run this model on the CPU backend"));
  }
  ModelWeights w;
  w.checkpoint_ = ckpt;
  WeightLoader load(c.architecture_name, *ckpt, backend, options, &w.owned_);
  const std::int64_t h = c.hidden_size;
  BATON_ASSIGN_OR_RETURN(w.embed, load.matrix("model.embed_tokens.weight", c.vocab_size, h, "[vocab_size, hidden_size]"));
  BATON_ASSIGN_OR_RETURN(w.final_norm, load.norm(c, "model.norm.weight", h, "[hidden_size]"));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    BATON_ASSIGN_OR_RETURN(w.lm_head, load.matrix("lm_head.weight", c.vocab_size, h, "[vocab_size, hidden_size]"));
  }
  // Packed for linear() (a copy of its own when tied: the embedding lookup reads rows).
  BATON_ASSIGN_OR_RETURN(w.lm_head, load.for_linear(w.lm_head));
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    WeightLoader::LayerSpec spec;
    spec.experts = c.sparse_mlp.at(static_cast<std::size_t>(i));
    spec.linear_attention = c.is_linear_attention(i);
    BATON_ASSIGN_OR_RETURN(LayerWeights l, load.layer(c, str_cat("model.layers.", i, "."), spec));
    w.layers.push_back(l);
  }
  const std::set<std::string> used = load.used();
  std::vector<std::string> unused;
  for (const std::string& name : ckpt->names()) {
    // Qwen3-Next checkpoints carry their MTP module (mtp.*) beside the target: the MTP proposer's.
    const bool mtp = c.architecture == Architecture::kQwen3Next && name.starts_with("mtp.");
    if (!used.contains(name) && !is_ignorable_tensor(name) && !mtp && !(c.tie_word_embeddings && name == "lm_head.weight")) {
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
             bytes(l.out_proj);
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
    for (const TensorView* v : {&l.qkv, &l.o_proj, &l.gate_up, &l.down, &l.router, &l.in_proj, &l.out_proj}) {
      if (!v->empty()) names.insert(std::string(dtype_name(v->dtype)));
    }
    for (const TensorView& v : l.experts.gate_up) names.insert(std::string(dtype_name(v.dtype)));
  }
  return names.size() == 1 ? *names.begin() : std::string("mixed");
}

}  // namespace baton
