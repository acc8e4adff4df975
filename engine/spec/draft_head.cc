#include "engine/spec/draft_head.h"

#include <filesystem>

#include "common/status.h"
#include "common/text_file.h"
#include "engine/model/rope.h"
#include "engine/model/weight_loader.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace baton {
namespace {

using nlohmann::json;

// The decoder layer's shape from a head config written in Llama's vocabulary of keys.
absl::StatusOr<ModelConfig> layer_config_from(json layer, const ModelConfig& target, const std::string& where) {
  layer["architectures"] = json::array({"LlamaForCausalLM"});
  if (!layer.contains("vocab_size")) layer["vocab_size"] = target.vocab_size;
  layer["num_hidden_layers"] = 1;
  layer.erase("quantization_config");
  // An EAGLE head's layer is dense; configs written from an MoE target's may carry its expert keys.
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) layer.erase(key);
  return ModelConfig::parse(layer, nullptr, where);
}

}  // namespace

TargetStateSpec DraftHead::target_states() const {
  TargetStateSpec s;
  if (kind_ == HeadKind::kEagle3) {
    s.layer_inputs = aux_layers_;
  } else {
    s.final_hidden = true;
  }
  return s;
}

std::int32_t DraftHead::target_feature_width() const { return target_states().width(target_hidden_); }

KvCacheLayout DraftHead::kv_layout() const {
  return {num_modules(), config_.num_kv_heads, config_.head_dim, block_size_, backend_.activation_dtype()};
}

absl::StatusOr<std::unique_ptr<DraftHead>> DraftHead::load(SpecMethod method, const std::string& dir,
                                                           const ModelConfig& target, const ModelWeights& target_weights,
                                                           Backend& backend, const HeadOptions& options) {
  std::unique_ptr<DraftHead> h(new DraftHead(backend));
  h->target_hidden_ = target.hidden_size;
  h->block_size_ = options.block_size;
  BATON_ASSIGN_OR_RETURN(json cfg, read_json_object_file(dir + "/config.json"));
  const std::string where = dir + "/config.json";
  BATON_ASSIGN_OR_RETURN(h->checkpoint_, Checkpoint::open(dir));
  WeightLoadOptions wo;
  wo.dtype = options.dtype;
  std::string prefix;  // the draft layer's tensor prefix

  if (method == SpecMethod::kEagle) {
    h->kind_ = HeadKind::kEagle1;
    BATON_ASSIGN_OR_RETURN(h->config_, layer_config_from(cfg, target, where));
    prefix = h->checkpoint_->find("layers.0.self_attn.q_proj.weight") ? "layers.0." : "model.layers.0.";
  } else if (method == SpecMethod::kEagle3) {
    h->kind_ = HeadKind::kEagle3;
    const bool speculators = cfg.contains("speculators_config");
    json layer = speculators ? cfg.value("transformer_layer_config", json::object()) : cfg;
    if (speculators && layer.empty()) {
      return absl::InvalidArgumentError(str_cat(where, ": speculators format without `transformer_layer_config`"));
    }
    BATON_ASSIGN_OR_RETURN(h->config_, layer_config_from(layer, target, where));
    h->norm_before_residual_ = cfg.value("norm_before_residual", speculators);
    prefix = h->checkpoint_->find("midlayer.self_attn.q_proj.weight") ? "midlayer." : "layers.0.";
    h->out_vocab_ = cfg.value("draft_vocab_size", layer.value("draft_vocab_size", target.vocab_size));
    const std::int32_t n = target.num_layers;
    std::vector<std::int32_t> aux = {2, n / 2, n - 3};
    const json* ids = cfg.contains("eagle_aux_hidden_state_layer_ids") ? &cfg["eagle_aux_hidden_state_layer_ids"]
                      : speculators && cfg["speculators_config"].contains("eagle_aux_hidden_state_layer_ids")
                          ? &cfg["speculators_config"]["eagle_aux_hidden_state_layer_ids"]
                          : nullptr;
    if (ids != nullptr) {
      if (!ids->is_array() || ids->size() != 3) {
        return absl::InvalidArgumentError(str_cat(where, ": `eagle_aux_hidden_state_layer_ids` must list 3 layer ids"));
      }
      aux = ids->get<std::vector<std::int32_t>>();
    }
    for (std::int32_t id : aux) {
      if (id < 0 || id >= n) {
        return absl::InvalidArgumentError(str_cat(where, ": EAGLE-3 aux layer ", id, " outside the target's ", n,
                                                  " layers (set `eagle_aux_hidden_state_layer_ids`)"));
      }
    }
    h->aux_layers_ = aux;
    const std::int32_t target_hidden = cfg.value("target_hidden_size", h->config_.hidden_size);
    if (target_hidden != target.hidden_size) {
      return absl::InvalidArgumentError(str_cat(where, ": target_hidden_size ", target_hidden, " but the target has ",
                                                target.hidden_size));
    }
  } else {
    BATON_ASSIGN_OR_RETURN(h->config_, ModelConfig::parse(cfg, nullptr, where));
    if (h->config_.architecture == Architecture::kQwen35) {
      return absl::UnimplementedError(str_cat(where, ": ", h->config_.architecture_name,
                                              "'s MTP module is not supported yet (Qwen3-Next's is)"));
    }
    if (h->checkpoint_->find("mtp.fc.weight") != nullptr) {
      h->kind_ = HeadKind::kMtpQwen3Next;
    } else {
      h->kind_ = HeadKind::kMtpDeepSeek;
    }
  }
  const ModelConfig& c = h->config_;
  if (c.hidden_size != target.hidden_size) {
    return absl::InvalidArgumentError(str_cat(where, ": the draft layer's hidden_size ", c.hidden_size,
                                              " differs from the target's ", target.hidden_size,
                                              " (the head shares the target's embeddings)"));
  }
  const std::int64_t hs = c.hidden_size;
  WeightLoader load(str_cat(spec_method_name(method), " head"), *h->checkpoint_, backend, wo, &h->owned_);

  switch (h->kind_) {
    case HeadKind::kEagle1: {
      HeadModule m;
      BATON_ASSIGN_OR_RETURN(m.fuse, load.matrix("fc.weight", hs, 2 * hs, "[hidden, 2 hidden]"));
      BATON_ASSIGN_OR_RETURN(m.fuse, load.for_linear(m.fuse));
      if (load.has("fc.bias")) {
        BATON_ASSIGN_OR_RETURN(m.fuse_bias, load.vector_f32({{"fc.bias", hs}}, "[hidden]"));
      }
      BATON_ASSIGN_OR_RETURN(m.layer, load.layer(c, prefix, {.input_norm = false, .in_width = hs}));
      m.lm_head = target_weights.lm_head;
      m.embed = target_weights.embed;
      h->out_vocab_ = target.vocab_size;
      h->modules_.push_back(m);
      break;
    }
    case HeadKind::kEagle3: {
      HeadModule m;
      BATON_ASSIGN_OR_RETURN(m.fuse, load.matrix("fc.weight", hs, 3LL * target.hidden_size, "[hidden, 3 target hidden]"));
      BATON_ASSIGN_OR_RETURN(m.fuse, load.for_linear(m.fuse));
      BATON_ASSIGN_OR_RETURN(m.embed_norm, load.vector_f32({{prefix + "input_layernorm.weight", hs}}, "[hidden]"));
      BATON_ASSIGN_OR_RETURN(m.hidden_norm, load.vector_f32({{prefix + "hidden_norm.weight", hs}}, "[hidden]"));
      BATON_ASSIGN_OR_RETURN(m.layer, load.layer(c, prefix, {.input_norm = false, .in_width = 2 * hs}));
      BATON_ASSIGN_OR_RETURN(m.out_norm, load.vector_f32({{"norm.weight", hs}}, "[hidden]"));
      BATON_ASSIGN_OR_RETURN(m.lm_head, load.matrix("lm_head.weight", h->out_vocab_, hs, "[draft_vocab_size, hidden]"));
      BATON_ASSIGN_OR_RETURN(m.lm_head, load.for_linear(m.lm_head));
      // A head that ships its own embeddings uses them (as vLLM does); otherwise the target's.
      m.embed = target_weights.embed;
      for (const char* name : {"embed_tokens.weight", "model.embed_tokens.weight"}) {
        if (load.has(name)) {
          BATON_ASSIGN_OR_RETURN(m.embed, load.matrix(name, target.vocab_size, hs, "[vocab, hidden]"));
        }
      }
      if (h->out_vocab_ != target.vocab_size || load.has("d2t")) {
        BATON_ASSIGN_OR_RETURN(const auto d2t, load.int64_vector("d2t", h->out_vocab_, "[draft_vocab_size] offsets"));
        for (std::size_t i = 0; i < d2t.size(); ++i) {
          const std::int64_t t = static_cast<std::int64_t>(i) + d2t[i];
          if (t < 0 || t >= target.vocab_size) {
            return absl::InvalidArgumentError(str_cat(dir, ": d2t maps draft token ", i, " to ", t,
                                                      ", outside the target vocabulary of ", target.vocab_size));
          }
          h->d2t_.push_back(static_cast<std::int32_t>(d2t[i]));
        }
      }
      h->modules_.push_back(m);
      break;
    }
    case HeadKind::kMtpDeepSeek: {
      const std::int32_t layers = cfg.value("num_nextn_predict_layers", 0);
      if (layers < 1) {
        return absl::InvalidArgumentError(
            str_cat(where, ": `num_nextn_predict_layers` is ", layers, ": this model has no MTP layers. A speculative "
                    "config {\"method\": \"mtp\"} without \"model\" uses the target's own; for a separate head, give "
                    "\"model\": the directory of an MTP head (e.g. models/baton-tiny-code/mtp)"));
      }
      for (std::int32_t i = 0; i < layers; ++i) {
        const std::string p = str_cat("model.layers.", c.num_layers + i, ".");
        HeadModule m;
        BATON_ASSIGN_OR_RETURN(m.fuse, load.matrix(p + "eh_proj.weight", hs, 2 * hs, "[hidden, 2 hidden]"));
        BATON_ASSIGN_OR_RETURN(m.fuse, load.for_linear(m.fuse));
        BATON_ASSIGN_OR_RETURN(m.embed_norm, load.vector_f32({{p + "enorm.weight", hs}}, "[hidden]"));
        BATON_ASSIGN_OR_RETURN(m.hidden_norm, load.vector_f32({{p + "hnorm.weight", hs}}, "[hidden]"));
        BATON_ASSIGN_OR_RETURN(m.layer, load.layer(c, p, {.input_norm = true, .in_width = hs}));
        BATON_ASSIGN_OR_RETURN(m.out_norm, load.vector_f32({{p + "shared_head.norm.weight", hs}}, "[hidden]"));
        BATON_ASSIGN_OR_RETURN(m.lm_head, load.matrix(p + "shared_head.head.weight", c.vocab_size, hs, "[vocab, hidden]"));
        BATON_ASSIGN_OR_RETURN(m.lm_head, load.for_linear(m.lm_head));
        if (load.has(p + "embed_tokens.weight")) {
          BATON_ASSIGN_OR_RETURN(m.embed, load.matrix(p + "embed_tokens.weight", c.vocab_size, hs, "[vocab, hidden]"));
        } else {
          m.embed = target_weights.embed;
        }
        h->modules_.push_back(m);
      }
      h->out_vocab_ = c.vocab_size;
      break;
    }
    case HeadKind::kMtpQwen3Next: {
      const std::int32_t layers = cfg.value("num_nextn_predict_layers", 1);
      for (std::int32_t i = 0; i < layers; ++i) {
        HeadModule m;
        BATON_ASSIGN_OR_RETURN(m.fuse, load.matrix("mtp.fc.weight", hs, 2 * hs, "[hidden, 2 hidden]"));
        BATON_ASSIGN_OR_RETURN(m.fuse, load.for_linear(m.fuse));
        // With a Qwen3-Next config the norms are zero-centred, the layer is a gated full-attention
        // layer, and its MLP is the experts wherever the config's rule puts them (layer i).
        BATON_ASSIGN_OR_RETURN(m.embed_norm, load.norm(c, "mtp.pre_fc_norm_embedding.weight", hs, "[hidden]"));
        BATON_ASSIGN_OR_RETURN(m.hidden_norm, load.norm(c, "mtp.pre_fc_norm_hidden.weight", hs, "[hidden]"));
        WeightLoader::LayerSpec spec{.input_norm = true, .in_width = hs};
        spec.experts = c.has_experts() && static_cast<std::size_t>(i) < c.sparse_mlp.size() &&
                       c.sparse_mlp[static_cast<std::size_t>(i)];
        BATON_ASSIGN_OR_RETURN(m.layer, load.layer(c, str_cat("mtp.layers.", i, "."), spec));
        BATON_ASSIGN_OR_RETURN(m.out_norm, load.norm(c, "mtp.norm.weight", hs, "[hidden]"));
        m.lm_head = target_weights.lm_head;
        m.embed = target_weights.embed;
        h->modules_.push_back(m);
      }
      h->out_vocab_ = target.vocab_size;
      break;
    }
  }
  if (c.vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(str_cat(where, ": vocab_size ", c.vocab_size, " differs from the target's ",
                                              target.vocab_size));
  }
  BATON_RETURN_IF_ERROR(h->allocate(options, target.vocab_size));
  spdlog::info("{} head from {}: {} module(s), hidden {}, output vocabulary {}", spec_method_name(method), dir,
               h->num_modules(), hs, h->out_vocab_);
  return h;
}

absl::Status DraftHead::allocate(const HeadOptions& o, std::int32_t vocab) {
  BatchLimits limits;
  limits.max_num_tokens = o.max_num_tokens;
  limits.max_num_seqs = o.max_num_seqs;
  limits.max_num_logits = o.max_num_seqs;
  limits.max_model_len = o.max_model_len;
  limits.block_size = o.block_size;
  limits.vocab_size = vocab;
  max_num_logits_ = o.max_num_seqs;
  max_num_tokens_ = o.max_num_tokens;
  BATON_RETURN_IF_ERROR(plan_.allocate(backend_, limits));
  const std::int32_t k = o.num_speculative_tokens > 0 ? o.num_speculative_tokens : num_modules();
  graphs_ = std::make_unique<ForwardGraphs>(backend_.captures_graphs() ? o.graph_max_seqs : 0, k + 2, limits);
  const auto t = static_cast<std::size_t>(o.max_num_tokens);
  const auto h = static_cast<std::size_t>(config_.hidden_size);
  const auto f = sizeof(float);
  const std::size_t feature_width = std::max<std::size_t>(h, static_cast<std::size_t>(target_feature_width()));
  auto alloc = [&](DeviceBuffer* b, std::size_t bytes) -> absl::Status {
    BATON_ASSIGN_OR_RETURN(*b, backend_.allocate(bytes));
    return absl::OkStatus();
  };
  const std::vector<float> inv = rope_inv_freq(config_);
  BATON_RETURN_IF_ERROR(alloc(&inv_freq_, inv.size() * f));
  backend_.copy_to_device(inv_freq_.data(), inv.data(), inv.size() * f);
  BATON_RETURN_IF_ERROR(alloc(&features_, t * feature_width * f));
  BATON_RETURN_IF_ERROR(alloc(&emb_, t * h * f));
  BATON_RETURN_IF_ERROR(alloc(&cat_, t * 2 * h * f));
  BATON_RETURN_IF_ERROR(alloc(&resid_, t * h * f));
  BATON_RETURN_IF_ERROR(layer_workspace_.allocate(backend_, config_, o.max_num_tokens));
  BATON_RETURN_IF_ERROR(alloc(&cos_sin_, t * static_cast<std::size_t>(config_.rope_dim()) * f));
  const auto l = static_cast<std::size_t>(max_num_logits_);
  BATON_RETURN_IF_ERROR(alloc(&selected_, l * h * f));
  BATON_RETURN_IF_ERROR(alloc(&selected_normed_, l * h * f));
  BATON_RETURN_IF_ERROR(alloc(&logits_, l * static_cast<std::size_t>(out_vocab_) * f));
  BATON_RETURN_IF_ERROR(alloc(&zero_row_, h * f));
  const std::vector<float> zeros(h, 0.0f);
  backend_.copy_to_device(zero_row_.data(), zeros.data(), h * f);
  return absl::OkStatus();
}

TensorView DraftHead::feature_input(std::int64_t tokens, std::int64_t width) const {
  BATON_CHECK(tokens <= max_num_tokens_ && width <= std::max(hidden(), target_feature_width()), "draft head: features of ",
              tokens, " tokens of width ", width, " exceed its buffer");
  return features_.view(DType::kF32, {tokens, width});
}

absl::StatusOr<HeadOutput> DraftHead::forward(std::int32_t mi, const ForwardBatch& batch, const TensorView& feat,
                                              bool from_target, KvCache& cache, bool logits_to_host) {
  BATON_CHECK(mi >= 0 && mi < num_modules(), "head module ", mi);
  const HeadModule& m = modules_[static_cast<std::size_t>(mi)];
  const std::int64_t h = config_.hidden_size;
  const std::int64_t width = from_target ? target_feature_width() : h;
  const std::int64_t real_t = batch.num_tokens(), real_logits = batch.num_logits();
  if (feat.dtype != DType::kF32 || feat.ndim != 2 || feat.dim(0) != real_t || feat.dim(1) != width) {
    return absl::InternalError(str_cat("draft head: features ", feat.describe(), " for ", real_t, " tokens of width ", width));
  }
  // A graph reads its features from feature_input(), padded rows and all. DeepSeek's MTP changes
  // its ops for rows at position 0, so those forwards run eagerly.
  std::optional<GraphShape> shape;
  if (feat.data == features_.data()) shape = graphs_->shape_for(batch);
  if (shape && kind_ == HeadKind::kMtpDeepSeek) {
    for (const ForwardSequence& s : batch.sequences) {
      if (s.start_position == 0) shape.reset();
    }
  }
  BATON_RETURN_IF_ERROR(plan_.plan(batch, cache.num_blocks(), shape));
  const std::int64_t t = plan_.num_tokens(), n_logits = plan_.num_logits();
  const TensorView features = shape ? features_.view(DType::kF32, {t, width}) : feat;
  const TensorView sel = selected_.view(DType::kF32, {n_logits, h});
  const TensorView head_in = m.out_norm.empty() ? sel : selected_normed_.view(DType::kF32, {n_logits, h});
  const TensorView logits = logits_.view(DType::kF32, {n_logits, out_vocab_});
  auto enqueue = [&] { enqueue_forward(m, mi, features, from_target, cache, t, real_t, n_logits, head_in, logits); };
  if (shape) {
    GraphKey& key = graph_key_;
    key.shape = *shape;
    key.variant.assign({mi, from_target ? 1 : 0, width});
    key.kv_cache = cache.layer(0).data;
    key.kv_blocks = cache.num_blocks();
    graphs_->run(key, backend_, enqueue);
  } else {
    enqueue();
    graphs_->count_eager();
  }

  HeadOutput out;
  if (real_logits == 0) return out;
  // The real rows come first: cut the padding off.
  out.device_logits = logits.slice0(0, real_logits);
  if (logits_to_host) {
    out.logits.resize(static_cast<std::size_t>(real_logits * out_vocab_));
    backend_.copy_to_host(out.logits.data(), logits.data, out.logits.size() * sizeof(float));
  }
  // The state fed back while drafting: the pre-norm output, except Qwen3-Next's MTP, which
  // returns (and vLLM feeds back) its normed output.
  out.outputs = (kind_ == HeadKind::kMtpQwen3Next ? head_in : sel).slice0(0, real_logits);
  return out;
}

void DraftHead::enqueue_forward(const HeadModule& m, std::int32_t mi, const TensorView& feat, bool from_target,
                                KvCache& cache, std::int64_t t, std::int64_t real_t, std::int64_t n_logits, const TensorView& head_in,
                                const TensorView& logits) {
  const std::int64_t h = config_.hidden_size;
  Backend& b = backend_;
  const TensorView emb = emb_.view(DType::kF32, {t, h});
  b.embedding(m.embed, plan_.tokens(), emb);
  if (kind_ == HeadKind::kMtpDeepSeek) {
    // DeepSeek's MTP sees no embedding at position 0. Real rows only: padding and filler rows
    // (some at position 0) are never read, and a graph must not keep a copy for a row that
    // another batch of its shape fills with a real token (a real row at position 0 runs eagerly).
    const auto& pos = plan_.host_positions();
    for (std::size_t i = 0; i < pos.size() && static_cast<std::int64_t>(i) < real_t; ++i) {
      if (pos[i] == 0) b.copy(zero_row_.view(DType::kF32, {1, h}), emb.slice0(static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1));
    }
  }
  const TensorView cat = cat_.view(DType::kF32, {t, 2 * h});
  const TensorView left = cat.slice_last(0, h), right = cat.slice_last(h, 2 * h);
  const TensorView resid = resid_.view(DType::kF32, {t, h});
  const LayerScratch s = layer_workspace_.views(config_, t);
  LayerBatch lb;
  lb.cos_sin = cos_sin_.view(DType::kF32, {t, config_.rope_dim()});
  lb.slots = plan_.slots();
  lb.attention = plan_.attention();
  b.rope_cos_sin(plan_.positions(), inv_freq_.view(DType::kF32, {config_.rope_dim() / 2}), lb.cos_sin);

  TensorView attn_input = resid;
  switch (kind_) {
    case HeadKind::kEagle1:
      b.copy(emb, left);
      b.copy(feat, right);
      b.linear(cat, m.fuse, m.fuse_bias, resid);
      break;
    case HeadKind::kEagle3:
      if (from_target) {
        b.linear(feat, m.fuse, TensorView{}, resid);
      } else {
        b.copy(feat, resid);
      }
      b.rms_norm(emb, m.embed_norm, config_.rms_norm_eps, left);
      b.rms_norm(resid, m.hidden_norm, config_.rms_norm_eps, right);
      if (norm_before_residual_) b.copy(right, resid);
      attn_input = cat;
      break;
    case HeadKind::kMtpDeepSeek:
    case HeadKind::kMtpQwen3Next:
      b.rms_norm(emb, m.embed_norm, config_.rms_norm_eps, left);
      b.rms_norm(feat, m.hidden_norm, config_.rms_norm_eps, right);
      b.linear(cat, m.fuse, TensorView{}, resid);
      b.rms_norm(resid, m.layer.input_norm, config_.rms_norm_eps, s.hidden);
      attn_input = s.hidden;
      break;
  }
  decoder_layer(b, config_, m.layer, 0, attn_input, resid, s, lb, LayerCache{cache.layer(mi), {}, {}});

  if (n_logits == 0) return;
  const TensorView sel = selected_.view(DType::kF32, {n_logits, h});
  b.gather_rows(resid, plan_.logits_rows(), sel);
  if (!m.out_norm.empty()) b.rms_norm(sel, m.out_norm, config_.rms_norm_eps, head_in);
  b.linear(head_in, m.lm_head, TensorView{}, logits);
}

}  // namespace baton
