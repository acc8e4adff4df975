#include "engine/spec/dflash_drafter.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>

#include "common/status.h"
#include "common/text_file.h"
#include "engine/model/rope.h"
#include "engine/model/safetensors.h"
#include "engine/model/weight_loader.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace baton {
namespace {

using nlohmann::json;

// A key of dflash_config, or (older checkpoints) of the top level.
const json* dflash_key(const json& cfg, const char* key) {
  if (auto d = cfg.find("dflash_config"); d != cfg.end() && d->is_object() && d->contains(key)) return &(*d)[key];
  if (auto it = cfg.find(key); it != cfg.end() && !it->is_null()) return &*it;
  return nullptr;
}

absl::StatusOr<std::int32_t> int_key(const json& v, const std::string& where, const char* key) {
  if (!v.is_number_integer()) return absl::InvalidArgumentError(str_cat(where, ": `", key, "` must be an integer"));
  return v.get<std::int32_t>();
}

}  // namespace

std::string DFlashDrafter::attention_kinds() const {
  std::string out;
  for (std::size_t i = 0; i < layer_causal_.size(); ++i) {
    const std::int32_t window = config_.sliding_window[i];
    out += str_cat(i == 0 ? "" : ", ", layer_causal_[i] ? "causal" : "non-causal",
                   window > 0 ? str_cat(" window ", window) : std::string());
  }
  return out;
}

TargetStateSpec DFlashDrafter::target_states() const {
  TargetStateSpec s;
  for (std::int32_t id : layer_ids_) {
    if (id == target_layers_ - 1) {
      s.final_hidden = true;
    } else {
      s.layer_inputs.push_back(id + 1);
    }
  }
  return s;
}

KvCacheLayout DFlashDrafter::kv_layout() const {
  return {config_.num_layers, config_.num_kv_heads, config_.head_dim, kv_block_size_, backend_.activation_dtype()};
}

absl::StatusOr<std::unique_ptr<DFlashDrafter>> DFlashDrafter::load(const std::string& dir, const ModelConfig& target,
                                                                   const ModelWeights& target_weights, Backend& backend,
                                                                   const DFlashOptions& options) {
  std::unique_ptr<DFlashDrafter> d(new DFlashDrafter(backend));
  d->target_hidden_ = target.hidden_size;
  d->target_layers_ = target.num_layers;
  d->kv_block_size_ = options.block_size;
  BATON_RETURN_IF_ERROR(d->read_config(dir, target));
  const std::string where = dir + "/config.json";
  if (d->trained_block_ > 0 && options.num_speculative_tokens > d->trained_block_ - 1) {
    return absl::InvalidArgumentError(str_cat(where, ": the drafter was trained on blocks of ", d->trained_block_,
                                              " tokens (block_size), so it drafts at most ", d->trained_block_ - 1,
                                              " tokens per step; num_speculative_tokens is ", options.num_speculative_tokens));
  }
  BATON_RETURN_IF_ERROR(d->load_weights(dir, target, target_weights, options));
  BATON_RETURN_IF_ERROR(d->allocate(options, target.vocab_size));
  std::string ids;
  for (std::int32_t id : d->layer_ids_) ids += str_cat(ids.empty() ? "" : ", ", id);
  spdlog::info("dflash drafter from {}: {} layer(s), hidden {}, target layers [{}], mask token {}, attention {}, "
               "output vocabulary {}",
               dir, d->config_.num_layers, d->config_.hidden_size, ids, d->mask_token_id_,
               d->attention_kinds(), d->out_vocab_);
  return d;
}

absl::Status DFlashDrafter::read_config(const std::string& dir, const ModelConfig& target) {
  const std::string where = dir + "/config.json";
  BATON_ASSIGN_OR_RETURN(json cfg, read_json_object_file(where));
  if (auto d = cfg.find("dflash_config"); d != cfg.end() && !d->is_object() && !d->is_null()) {
    return absl::InvalidArgumentError(str_cat(where, ": `dflash_config` must be an object"));
  }
  // Variants this drafter does not run yet are refused by name rather than drafted wrongly.
  if (const json* v = dflash_key(cfg, "use_aux_hidden_state"); v != nullptr && v->is_boolean() && !v->get<bool>()) {
    return absl::UnimplementedError(str_cat(where, ": use_aux_hidden_state false (a context without the fc fusion) is "
                                                   "not supported; DFlash checkpoints fuse target layers with fc"));
  }
  if (const json* v = dflash_key(cfg, "use_swa"); v != nullptr && v->is_boolean() && v->get<bool>()) {
    return absl::UnimplementedError(str_cat(where, ": sliding-window DFlash layers (use_swa) are not supported yet"));
  }
  if (const json* v = dflash_key(cfg, "attention_sink_bias"); v != nullptr && v->is_boolean() && v->get<bool>()) {
    return absl::UnimplementedError(str_cat(where, ": attention sink biases are not supported"));
  }
  if (cfg.contains("add_swa_attention_sink_bias") && cfg["add_swa_attention_sink_bias"] == true) {
    return absl::UnimplementedError(str_cat(where, ": attention sink biases are not supported"));
  }
  // DFlash2 (a dynamic causal convolution around each layer's mixer and MLP, and a candidate
  // selector that rescores each row's top drafts given the previous one).
  if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array()) {
    for (const json& name : *a) {
      if (name == "DFlash2DraftModel") {
        return absl::UnimplementedError(str_cat(where, ": DFlash2DraftModel (convolutions and a candidate selector) "
                                                       "is not supported; DFlashDraftModel is"));
      }
    }
  }
  // Scalings Baton's drafter does not apply: a drafter trained with them would draft worse.
  for (const char* key : {"input_embedding_scale", "output_multiplier"}) {
    if (const json* v = dflash_key(cfg, key); v != nullptr && !(v->is_number() && v->get<double>() == 1.0)) {
      return absl::UnimplementedError(str_cat(where, ": ", key, " ", v->dump(), " is not supported (only 1)"));
    }
  }
  if (const json* v = dflash_key(cfg, "final_logit_softcapping"); v != nullptr && !(v->is_number() && v->get<double>() <= 0)) {
    return absl::UnimplementedError(str_cat(where, ": final_logit_softcapping ", v->dump(), " is not supported"));
  }

  const json* ids = dflash_key(cfg, "target_layer_ids");
  if (ids == nullptr || !ids->is_array() || ids->empty()) {
    return absl::InvalidArgumentError(str_cat(where, ": `dflash_config.target_layer_ids` must list the target layers "
                                                     "whose outputs the drafter reads"));
  }
  std::set<std::int32_t> seen;
  for (const json& v : *ids) {
    BATON_ASSIGN_OR_RETURN(const std::int32_t id, int_key(v, where, "target_layer_ids"));
    if (id < 0 || id >= target.num_layers) {
      return absl::InvalidArgumentError(str_cat(where, ": target_layer_ids has layer ", id, ", outside the target's ",
                                                target.num_layers, " layers (a drafter for another model?)"));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(str_cat(where, ": target_layer_ids lists layer ", id, " twice"));
    }
    layer_ids_.push_back(id);
  }
  // The last layer's output is the target's final-norm output, which comes after every layer
  // input in the captured states: it must be listed last.
  for (std::size_t i = 0; i + 1 < layer_ids_.size(); ++i) {
    if (layer_ids_[i] == target.num_layers - 1) {
      return absl::InvalidArgumentError(str_cat(where, ": target_layer_ids lists the target's last layer (",
                                                target.num_layers - 1, ") before other layers; list it last"));
    }
  }
  if (auto n = cfg.find("num_target_layers"); n != cfg.end() && n->is_number_integer() &&
                                              n->get<std::int32_t>() != target.num_layers) {
    return absl::InvalidArgumentError(str_cat(where, ": num_target_layers is ", n->get<std::int32_t>(),
                                              " but the target has ", target.num_layers, " layers"));
  }
  const json* mask = dflash_key(cfg, "mask_token_id");
  if (mask == nullptr) {
    return absl::InvalidArgumentError(str_cat(where, ": `dflash_config.mask_token_id` is required (the token the "
                                                     "query block's masked slots are embedded as)"));
  }
  BATON_ASSIGN_OR_RETURN(mask_token_id_, int_key(*mask, where, "mask_token_id"));
  if (mask_token_id_ < 0 || mask_token_id_ >= target.vocab_size) {
    return absl::InvalidArgumentError(str_cat(where, ": mask_token_id ", mask_token_id_, " is outside the target's "
                                              "vocabulary of ", target.vocab_size));
  }
  if (const json* b = dflash_key(cfg, "block_size"); b != nullptr) {
    BATON_ASSIGN_OR_RETURN(trained_block_, int_key(*b, where, "block_size"));
    if (trained_block_ < 2) {
      return absl::InvalidArgumentError(str_cat(where, ": block_size ", trained_block_, " must be at least 2"));
    }
  }
  // Causality: is_causal, then dflash_config.causal, for every layer; without either, each
  // layer's type decides: sliding-window layers are causal, full-attention layers are not.
  std::optional<bool> causal;
  if (auto c = cfg.find("is_causal"); c != cfg.end() && c->is_boolean()) {
    causal = c->get<bool>();
  } else if (auto d = cfg.find("dflash_config"); d != cfg.end() && d->is_object() && (*d).contains("causal") &&
                                                 (*d)["causal"].is_boolean()) {
    causal = (*d)["causal"].get<bool>();
  }

  // The draft layers are Qwen3 layers (q/k norms): parse them as a Qwen3 model of that many layers.
  json layer = cfg;
  layer["architectures"] = json::array({"Qwen3ForCausalLM"});
  layer["model_type"] = "qwen3";
  if (!layer.contains("vocab_size")) layer["vocab_size"] = target.vocab_size;
  for (const char* key : {"dflash_config", "quantization_config", "num_experts"}) layer.erase(key);
  BATON_ASSIGN_OR_RETURN(config_, ModelConfig::parse(layer, nullptr, where));
  layer_causal_.clear();
  for (std::int32_t i = 0; i < config_.num_layers; ++i) {
    const std::int32_t window = config_.sliding_window[static_cast<std::size_t>(i)];
    layer_causal_.push_back(causal.value_or(window > 0));
    if (window > 0 && !layer_causal_.back()) {
      // A non-causal query would see keys up to `window` positions after it too, which paged
      // attention's one visible position per query cannot express.
      return absl::UnimplementedError(str_cat(where, ": layer ", i, " is a non-causal sliding-window layer (",
                                              "sliding_attention with is_causal false), which is not supported"));
    }
  }
  if (config_.hidden_size != target.hidden_size) {
    return absl::InvalidArgumentError(str_cat(where, ": hidden_size ", config_.hidden_size, " differs from the target's ",
                                              target.hidden_size, " (the drafter embeds with the target's embeddings)"));
  }
  if (config_.vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(str_cat(where, ": vocab_size ", config_.vocab_size, " differs from the target's ",
                                              target.vocab_size));
  }
  out_vocab_ = cfg.value("draft_vocab_size", target.vocab_size);
  return absl::OkStatus();
}

absl::Status DFlashDrafter::load_weights(const std::string& dir, const ModelConfig& target,
                                         const ModelWeights& target_weights, const DFlashOptions& options) {
  BATON_ASSIGN_OR_RETURN(checkpoint_, Checkpoint::open(dir));
  WeightLoadOptions wo;
  wo.dtype = options.dtype;
  WeightLoader load("dflash drafter", *checkpoint_, backend_, wo, &owned_);
  const ModelConfig& c = config_;
  const std::int64_t hs = c.hidden_size, kv = c.kv_size();

  BATON_ASSIGN_OR_RETURN(fc_, load.matrix("fc.weight", hs, target_feature_width(), "[hidden, target layers x hidden]"));
  BATON_ASSIGN_OR_RETURN(fc_, load.for_linear(fc_));
  BATON_ASSIGN_OR_RETURN(hidden_norm_, load.vector_f32({{"hidden_norm.weight", hs}}, "[hidden]"));
  BATON_ASSIGN_OR_RETURN(norm_, load.vector_f32({{"norm.weight", hs}}, "[hidden]"));
  std::vector<std::pair<std::string, std::int64_t>> kv_parts, kv_bias_parts;
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = str_cat("layers.", i, ".");
    BATON_ASSIGN_OR_RETURN(LayerWeights l, load.layer(c, p, {.input_norm = true, .in_width = hs}));
    layers_.push_back(std::move(l));
    kv_parts.emplace_back(p + "self_attn.k_proj.weight", kv);
    kv_parts.emplace_back(p + "self_attn.v_proj.weight", kv);
    kv_bias_parts.emplace_back(p + "self_attn.k_proj.bias", kv);
    kv_bias_parts.emplace_back(p + "self_attn.v_proj.bias", kv);
  }
  // The context's keys and values of every layer in one matrix: one GEMM per context batch. (A
  // second copy of k_proj/v_proj: the block's forward reads them fused with q_proj.)
  BATON_ASSIGN_OR_RETURN(context_kv_, load.fused(kv_parts, hs, "[hidden] -> each layer's keys and values"));
  BATON_ASSIGN_OR_RETURN(context_kv_, load.for_linear(context_kv_));
  if (c.qkv_bias) {  // attention_bias: the context's keys and values get k_proj's and v_proj's biases too
    BATON_ASSIGN_OR_RETURN(context_kv_bias_, load.vector_f32(kv_bias_parts, "[kv heads x head_dim]"));
  }

  embed_ = target_weights.embed;
  if (load.has("embed_tokens.weight")) {
    BATON_ASSIGN_OR_RETURN(embed_, load.matrix("embed_tokens.weight", target.vocab_size, hs, "[vocab, hidden]"));
  }
  if (load.has("lm_head.weight")) {
    BATON_ASSIGN_OR_RETURN(lm_head_, load.matrix("lm_head.weight", out_vocab_, hs, "[draft_vocab_size, hidden]"));
    BATON_ASSIGN_OR_RETURN(lm_head_, load.for_linear(lm_head_));
  } else if (out_vocab_ != target.vocab_size) {
    return absl::InvalidArgumentError(str_cat(dir, ": draft_vocab_size ", out_vocab_, " but no lm_head.weight of "
                                              "that many rows"));
  } else {
    lm_head_ = target_weights.lm_head;
  }
  if (out_vocab_ != target.vocab_size || load.has("d2t")) {
    BATON_ASSIGN_OR_RETURN(const auto d2t, load.int64_vector("d2t", out_vocab_, "[draft_vocab_size] offsets"));
    for (std::size_t i = 0; i < d2t.size(); ++i) {
      const std::int64_t t = static_cast<std::int64_t>(i) + d2t[i];
      if (t < 0 || t >= target.vocab_size) {
        return absl::InvalidArgumentError(str_cat(dir, ": d2t maps draft token ", i, " to ", t,
                                                  ", outside the target vocabulary of ", target.vocab_size));
      }
      d2t_.push_back(static_cast<std::int32_t>(d2t[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status DFlashDrafter::allocate(const DFlashOptions& o, std::int32_t vocab) {
  const std::int32_t k = std::max(o.num_speculative_tokens, 1);
  max_context_tokens_ = o.max_context_tokens;
  max_block_tokens_ = o.max_num_seqs * (k + 1);
  max_logits_ = o.max_num_seqs * k;
  BatchLimits limits;
  limits.max_num_seqs = o.max_num_seqs;
  limits.max_model_len = o.max_model_len;
  limits.block_size = o.block_size;
  limits.vocab_size = vocab;
  limits.max_num_tokens = max_context_tokens_;
  limits.max_num_logits = o.max_num_seqs;  // catch-up chunks may ask for one; never read
  BATON_RETURN_IF_ERROR(context_plan_.allocate(backend_, limits));
  const std::int32_t graph_seqs = backend_.captures_graphs() ? std::min(o.graph_max_seqs, o.max_num_seqs) : 0;
  limits.max_num_tokens = max_block_tokens_;
  // A replayed block has logits at every token (the graph's shape), padding rows included.
  limits.max_num_logits = graph_seqs > 0 ? max_block_tokens_ : max_logits_;
  BATON_RETURN_IF_ERROR(block_plan_.allocate(backend_, limits));
  graphs_ = std::make_unique<ForwardGraphs>(graph_seqs, k + 1, limits);
  every_row_.resize(static_cast<std::size_t>(k + 1));
  std::iota(every_row_.begin(), every_row_.end(), 0);

  const auto f = sizeof(float);
  const auto h = static_cast<std::size_t>(config_.hidden_size);
  const auto ct = static_cast<std::size_t>(max_context_tokens_), bt = static_cast<std::size_t>(max_block_tokens_);
  const auto rope = static_cast<std::size_t>(config_.rope_dim());
  auto alloc = [&](DeviceBuffer* b, std::size_t bytes) -> absl::Status {
    BATON_ASSIGN_OR_RETURN(*b, backend_.allocate(std::max<std::size_t>(bytes, f)));
    return absl::OkStatus();
  };
  const std::vector<float> inv = rope_inv_freq(config_);
  BATON_RETURN_IF_ERROR(alloc(&inv_freq_, inv.size() * f));
  backend_.copy_to_device(inv_freq_.data(), inv.data(), inv.size() * f);
  BATON_RETURN_IF_ERROR(alloc(&features_, ct * static_cast<std::size_t>(target_feature_width()) * f));
  BATON_RETURN_IF_ERROR(alloc(&fused_, ct * h * f));
  BATON_RETURN_IF_ERROR(alloc(&fused_normed_, ct * h * f));
  BATON_RETURN_IF_ERROR(alloc(&context_kv_out_, ct * static_cast<std::size_t>(context_kv_.dim(0)) * f));
  BATON_RETURN_IF_ERROR(alloc(&context_cos_sin_, ct * rope * f));
  BATON_RETURN_IF_ERROR(alloc(&resid_, bt * h * f));
  BATON_RETURN_IF_ERROR(alloc(&cos_sin_, bt * rope * f));
  BATON_RETURN_IF_ERROR(alloc(&attention_positions_, bt * sizeof(std::int32_t)));
  BATON_RETURN_IF_ERROR(workspace_.allocate(backend_, config_, max_block_tokens_));
  const auto l = static_cast<std::size_t>(max_logits_);
  const auto lm = static_cast<std::size_t>(limits.max_num_logits);  // rows the LM head may compute
  BATON_RETURN_IF_ERROR(alloc(&selected_, lm * h * f));
  BATON_RETURN_IF_ERROR(alloc(&selected_normed_, lm * h * f));
  BATON_RETURN_IF_ERROR(alloc(&logits_, l * static_cast<std::size_t>(out_vocab_) * f));
  if (graphs_->enabled()) {
    BATON_RETURN_IF_ERROR(alloc(&all_logits_, lm * static_cast<std::size_t>(out_vocab_) * f));
    BATON_RETURN_IF_ERROR(alloc(&wanted_rows_, l * sizeof(std::int32_t)));
  }
  return absl::OkStatus();
}

TensorView DFlashDrafter::feature_input(std::int64_t tokens) const {
  BATON_CHECK(tokens <= max_context_tokens_, "dflash drafter: features of ", tokens, " tokens exceed its buffer of ",
              max_context_tokens_);
  return features_.view(DType::kF32, {tokens, target_feature_width()});
}

absl::Status DFlashDrafter::write_context(const ForwardBatch& batch, const TensorView& features, KvCache& cache) {
  const std::int64_t t = batch.num_tokens();
  if (features.dtype != DType::kF32 || features.ndim != 2 || features.dim(0) != t ||
      features.dim(1) != target_feature_width()) {
    return absl::InternalError(str_cat("dflash drafter: features ", features.describe(), " for ", t,
                                       " context tokens of width ", target_feature_width()));
  }
  BATON_RETURN_IF_ERROR(context_plan_.plan(batch, cache.num_blocks()));
  Backend& b = backend_;
  const ModelConfig& c = config_;
  const std::int64_t h = c.hidden_size, kv = c.kv_size(), layer_width = 2 * kv;
  const TensorView fused = fused_.view(DType::kF32, {t, h});
  const TensorView normed = fused_normed_.view(DType::kF32, {t, h});
  const TensorView all_kv = context_kv_out_.view(DType::kF32, {t, context_kv_.dim(0)});
  const TensorView cos_sin = context_cos_sin_.view(DType::kF32, {t, c.rope_dim()});
  b.linear(features, fc_, TensorView{}, fused);
  b.rms_norm(fused, hidden_norm_, c.rms_norm_eps, normed);
  b.linear(normed, context_kv_, context_kv_bias_, all_kv);
  b.rope_cos_sin(context_plan_.positions(), inv_freq_.view(DType::kF32, {c.rope_dim() / 2}), cos_sin);
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    const std::int64_t base = static_cast<std::int64_t>(i) * layer_width;
    const TensorView k = all_kv.slice_last(base, base + kv).split_last(c.num_kv_heads);
    const TensorView v = all_kv.slice_last(base + kv, base + layer_width).split_last(c.num_kv_heads);
    const LayerWeights& w = layers_[static_cast<std::size_t>(i)];
    if (c.qk_norm) b.rms_norm(k, w.k_norm, c.rms_norm_eps, k);
    b.apply_rope(c.rope_dim() < c.head_dim ? k.slice_last(0, c.rope_dim()) : k, cos_sin);
    b.write_kv(k, v, context_plan_.slots(), cache.layer(i));
  }
  return absl::OkStatus();
}

void DFlashDrafter::enqueue_block(std::int64_t t, std::int64_t n_logits, const LayerBatch& batch,
                                  const TensorView& block_positions, KvCache& cache, const TensorView& logits) {
  Backend& b = backend_;
  const ModelConfig& c = config_;
  const std::int64_t h = c.hidden_size;
  const TensorView resid = resid_.view(DType::kF32, {t, h});
  b.embedding(embed_, block_plan_.tokens(), resid);
  LayerBatch lb = batch;
  b.rope_cos_sin(block_plan_.positions(), inv_freq_.view(DType::kF32, {c.rope_dim() / 2}), lb.cos_sin);
  const TensorView causal_positions = lb.attention.positions;
  const LayerScratch s = workspace_.views(c, t);
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    const auto li = static_cast<std::size_t>(i);
    const LayerWeights& w = layers_[li];
    lb.attention.positions = layer_causal_[li] ? causal_positions : block_positions;
    b.rms_norm(resid, w.input_norm, c.rms_norm_eps, s.hidden);
    decoder_layer(b, c, w, c.sliding_window[li], s.hidden, resid, s, lb, LayerCache{cache.layer(i), {}, {}});
  }
  if (n_logits == 0) return;
  const TensorView sel = selected_.view(DType::kF32, {n_logits, h});
  const TensorView normed = selected_normed_.view(DType::kF32, {n_logits, h});
  b.gather_rows(resid, block_plan_.logits_rows(), sel);
  b.rms_norm(sel, norm_, c.rms_norm_eps, normed);
  b.linear(normed, lm_head_, TensorView{}, logits);
}

absl::StatusOr<TensorView> DFlashDrafter::draft(const ForwardBatch& batch, KvCache& cache) {
  // A graph replays blocks with logits at every token: the same sequences, asked that way.
  std::optional<GraphShape> shape;
  ForwardBatch& every = every_batch_;
  if (graphs_->enabled()) {
    every.sequences.assign(batch.sequences.begin(), batch.sequences.end());  // capacity kept
    for (ForwardSequence& s : every.sequences) {
      s.logits_indices = std::span<const std::int32_t>(every_row_).first(s.tokens.size());
    }
    shape = graphs_->shape_for(every);
  }
  BATON_RETURN_IF_ERROR(block_plan_.plan(shape ? every : batch, cache.num_blocks(), shape));
  Backend& b = backend_;
  const ModelConfig& c = config_;
  const std::int64_t t = block_plan_.num_tokens(), n_logits = block_plan_.num_logits();
  const std::int64_t wanted = batch.num_logits();

  LayerBatch lb;
  lb.cos_sin = cos_sin_.view(DType::kF32, {t, c.rope_dim()});
  lb.slots = block_plan_.slots();
  lb.attention = block_plan_.attention();
  TensorView block_positions = lb.attention.positions;
  if (std::find(layer_causal_.begin(), layer_causal_.end(), false) != layer_causal_.end()) {
    // In a non-causal layer every query of a block attends as if it stood at the block's last
    // position. The real tokens come first in the plan; padding keeps its own positions.
    mask_positions_.assign(block_plan_.host_positions().begin(), block_plan_.host_positions().end());
    std::size_t row = 0;
    for (const ForwardSequence& s : batch.sequences) {
      const auto last = static_cast<std::int32_t>(s.start_position + static_cast<std::int32_t>(s.tokens.size()) - 1);
      std::fill_n(mask_positions_.begin() + static_cast<std::ptrdiff_t>(row), s.tokens.size(), last);
      row += s.tokens.size();
    }
    block_positions = attention_positions_.view(DType::kI32, {t});
    b.copy_to_device(block_positions.data, mask_positions_.data(), mask_positions_.size() * sizeof(std::int32_t));
  }
  const TensorView logits = logits_.view(DType::kF32, {wanted, out_vocab_});
  if (!shape) {
    enqueue_block(t, n_logits, lb, block_positions, cache, logits);
    graphs_->count_eager();
    return logits;
  }
  const TensorView all = all_logits_.view(DType::kF32, {n_logits, out_vocab_});
  GraphKey& key = graph_key_;
  key.shape = *shape;
  key.variant.clear();
  key.kv_cache = cache.layer(0).data;
  key.kv_blocks = cache.num_blocks();
  graphs_->run(key, b, [&] { enqueue_block(t, n_logits, lb, block_positions, cache, all); });
  if (wanted == 0) return logits;
  // The wanted rows of the every-token logits: sequence j's real rows start after the real
  // tokens of the sequences before it.
  rows_wanted_.clear();
  std::int32_t first = 0;
  for (const ForwardSequence& s : batch.sequences) {
    for (const std::int32_t i : s.logits_indices) rows_wanted_.push_back(first + i);
    first += static_cast<std::int32_t>(s.tokens.size());
  }
  const TensorView index = wanted_rows_.view(DType::kI32, {wanted});
  b.copy_to_device(index.data, rows_wanted_.data(), rows_wanted_.size() * sizeof(std::int32_t));
  b.gather_rows(all, index, logits);
  return logits;
}

}  // namespace baton
