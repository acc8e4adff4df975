#include "engine/model/transformer.h"

#include <cmath>

#include "common/status.h"
#include "engine/model/decoder_layer.h"
#include "engine/model/rope.h"

namespace baton {

Transformer::Transformer(Backend& backend, const ModelConfig& config, ModelWeights weights,
                         const TransformerOptions& options)
    : backend_(backend), config_(config), weights_(std::move(weights)), options_(options) {
  std::int32_t kv = 0, state = 0;
  for (std::int32_t i = 0; i < config_.num_layers; ++i) {
    kv_index_.push_back(config_.is_attention(i) ? kv++ : -1);
    state_index_.push_back(config_.is_recurrent(i) ? state++ : -1);
  }
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::create(Backend& backend, const ModelConfig& config,
                                                                 ModelWeights weights, const TransformerOptions& options) {
  TransformerOptions o = options;
  if (o.max_model_len <= 0) o.max_model_len = config.max_position_embeddings;
  if (o.max_num_logits <= 0) o.max_num_logits = std::min(o.max_num_tokens, o.max_num_seqs * 9);
  if (o.max_num_tokens <= 0 || o.max_num_seqs <= 0 || o.block_size <= 0 || o.max_num_logits <= 0) {
    return absl::InvalidArgumentError(str_cat("transformer options: max_num_tokens (", o.max_num_tokens,
                                              "), max_num_seqs (", o.max_num_seqs, "), block_size (", o.block_size,
                                              ") and max_num_logits must be positive"));
  }
  std::unique_ptr<Transformer> t(new Transformer(backend, config, std::move(weights), o));
  BATON_RETURN_IF_ERROR(t->allocate_workspace());
  return t;
}

KvCacheLayout Transformer::kv_layout() const {
  KvCacheLayout l;
  l.num_layers = config_.num_attention_layers();
  l.num_kv_heads = config_.num_kv_heads;
  l.head_dim = config_.head_dim;
  l.block_size = options_.block_size;
  l.dtype = backend_.activation_dtype();
  return l;
}

StateCacheLayout recurrent_state_layout(const ModelConfig& c, std::int32_t slots) {
  StateCacheLayout l;
  l.num_layers = c.num_recurrent_layers();
  l.conv_floats = c.conv_state_floats();
  l.recurrent_floats = c.recurrent_state_floats();
  l.slots = slots;
  return l;
}

absl::Status Transformer::allocate_workspace() {
  const std::int64_t t = options_.max_num_tokens;
  const std::int64_t h = config_.hidden_size;
  const std::size_t f32 = sizeof(float);
  auto alloc = [&](DeviceBuffer* out, std::size_t bytes) -> absl::Status {
    BATON_ASSIGN_OR_RETURN(*out, backend_.allocate(bytes));
    return absl::OkStatus();
  };
  const std::vector<float> inv_freq = rope_inv_freq(config_);
  BATON_RETURN_IF_ERROR(alloc(&inv_freq_, inv_freq.size() * f32));
  backend_.copy_to_device(inv_freq_.data(), inv_freq.data(), inv_freq.size() * f32);
  const auto tu = static_cast<std::size_t>(t);
  BatchLimits limits;
  limits.max_num_tokens = options_.max_num_tokens;
  limits.max_num_seqs = options_.max_num_seqs;
  limits.max_num_logits = options_.max_num_logits;
  limits.max_model_len = options_.max_model_len;
  limits.block_size = options_.block_size;
  limits.vocab_size = config_.vocab_size;
  BATON_RETURN_IF_ERROR(plan_.allocate(backend_, limits));
  graphs_ = std::make_unique<ForwardGraphs>(backend_.captures_graphs() ? options_.graph_max_seqs : 0,
                                            options_.graph_max_tokens_per_seq, limits);
  BATON_RETURN_IF_ERROR(alloc(&residual_, tu * static_cast<std::size_t>(h) * f32));
  BATON_RETURN_IF_ERROR(layer_workspace_.allocate(backend_, config_, t));
  BATON_RETURN_IF_ERROR(alloc(&cos_sin_, tu * static_cast<std::size_t>(config_.rope_dim()) * f32));
  BATON_RETURN_IF_ERROR(alloc(&selected_, static_cast<std::size_t>(options_.max_num_logits) * static_cast<std::size_t>(h) * f32));
  BATON_RETURN_IF_ERROR(alloc(&logits_, static_cast<std::size_t>(options_.max_num_logits) *
                                            static_cast<std::size_t>(config_.vocab_size) * f32));
  return absl::OkStatus();
}

absl::Status Transformer::reserve_captures(std::size_t layer_inputs, bool final_hidden) {
  const std::size_t bytes = static_cast<std::size_t>(options_.max_num_tokens) *
                            static_cast<std::size_t>(config_.hidden_size) * sizeof(float);
  while (captures_.size() < layer_inputs) {
    BATON_ASSIGN_OR_RETURN(DeviceBuffer b, backend_.allocate(bytes));
    captures_.push_back(std::move(b));
  }
  if (final_hidden && final_hidden_.data() == nullptr) {
    BATON_ASSIGN_OR_RETURN(final_hidden_, backend_.allocate(bytes));
  }
  return absl::OkStatus();
}

void Transformer::layer_forward(std::int32_t i, std::int64_t t, KvCache& kv_cache, StateCache* state_cache,
                                const ForwardBatch& batch, const ForwardOutput& out) {
  const LayerWeights& w = weights_.layers[static_cast<std::size_t>(i)];
  const ModelConfig& c = config_;
  const TensorView residual = residual_.view(DType::kF32, {t, c.hidden_size});
  const LayerScratch s = layer_workspace_.views(c, t);
  LayerBatch lb;
  lb.cos_sin = cos_sin_.view(DType::kF32, {t, c.rope_dim()});
  lb.slots = plan_.slots();
  lb.attention = plan_.attention();
  LayerCache cache;
  if (const std::int32_t r = state_index_[static_cast<std::size_t>(i)]; r >= 0) {
    lb.recurrent = plan_.recurrent();
    cache.conv_state = state_cache->conv(r);
    cache.recurrent_state = state_cache->recurrent(r);
  } else if (const std::int32_t kv = kv_index_[static_cast<std::size_t>(i)]; kv >= 0) {
    cache.kv = kv_cache.layer(kv);
  }
  if (i == 0) {
    backend_.rms_norm(residual, w.input_norm, c.rms_norm_eps, s.hidden);
  } else {
    backend_.add_rms_norm(residual, s.hidden, w.input_norm, c.rms_norm_eps, s.hidden);
  }
  for (std::size_t k = 0; k < batch.capture_layer_inputs.size(); ++k) {
    if (batch.capture_layer_inputs[k] == i) backend_.copy(residual, out.layer_inputs[k]);
  }
  decoder_layer(backend_, c, w, c.sliding_window[static_cast<std::size_t>(i)], s.hidden, residual, s, lb, cache,
                /*add_mlp_output=*/false);
}

absl::StatusOr<ForwardOutput> Transformer::forward(const ForwardBatch& batch, KvCache& kv_cache,
                                                   StateCache* state_cache) {
  if (kv_cache.layout().num_layers != config_.num_attention_layers() ||
      kv_cache.layout().block_size != options_.block_size) {
    return absl::InvalidArgumentError(str_cat("KV cache layout ", kv_cache.layout().describe(),
                                              " does not fit this model (", kv_layout().describe(), ")"));
  }
  RecurrentLimits recurrent;
  if (config_.num_recurrent_layers() > 0) {
    if (state_cache == nullptr || state_cache->layout() != state_layout(state_cache->layout().slots)) {
      return absl::InvalidArgumentError(
          str_cat(config_.architecture_name, " has recurrent layers: its forward needs a recurrent state cache of ",
                  state_layout(1).describe(), ", given ",
                  state_cache == nullptr ? std::string("none") : state_cache->layout().describe()));
    }
    recurrent = {state_cache->num_groups(), state_cache->layout().slots};
  }
  const std::optional<GraphShape> shape = graphs_->shape_for(batch);
  BATON_RETURN_IF_ERROR(plan_.plan(batch, kv_cache.num_blocks(), shape, recurrent));
  const std::int64_t t = plan_.num_tokens();
  const std::int64_t n_logits = plan_.num_logits();
  const std::int64_t h = config_.hidden_size;
  if (batch.capture_layer_inputs.size() > captures_.size() || (batch.capture_final_hidden && final_hidden_.data() == nullptr)) {
    return absl::FailedPreconditionError(str_cat("forward captures ", batch.capture_layer_inputs.size(), " layer inputs",
                                                 batch.capture_final_hidden ? " and the final hidden state" : "",
                                                 " but reserve_captures() reserved ", captures_.size(),
                                                 final_hidden_.data() != nullptr ? " and the final hidden state" : ""));
  }
  ForwardOutput out;  // the planned (padded) rows
  for (std::size_t c = 0; c < batch.capture_layer_inputs.size(); ++c) {
    const std::int32_t layer = batch.capture_layer_inputs[c];
    if (layer < 0 || layer >= config_.num_layers) {
      return absl::InvalidArgumentError(str_cat("capture of layer ", layer, " outside [0, ", config_.num_layers, ")"));
    }
    out.layer_inputs.push_back(captures_[c].view(DType::kF32, {t, h}));
  }
  if (batch.capture_final_hidden) out.final_hidden = final_hidden_.view(DType::kF32, {t, h});
  out.logits = logits_.view(DType::kF32, {n_logits, config_.vocab_size});

  if (!shape) {
    enqueue_forward(batch, kv_cache, state_cache, t, n_logits, out);
    graphs_->count_eager();
    return out;
  }
  GraphKey& key = graph_key_;
  key.shape = *shape;
  key.variant.assign(batch.capture_layer_inputs.begin(), batch.capture_layer_inputs.end());
  key.variant.push_back(batch.capture_final_hidden ? -1 : -2);
  if (state_cache != nullptr) {  // the recurrent ops' buffers and slot count are frozen in a graph too
    key.variant.push_back(reinterpret_cast<std::intptr_t>(state_cache->conv(0).data));
    key.variant.push_back(state_cache->layout().slots);
  }
  key.kv_cache = kv_cache.region().base;
  key.kv_blocks = kv_cache.num_blocks();
  graphs_->run(key, backend_, [&] { enqueue_forward(batch, kv_cache, state_cache, t, n_logits, out); });
  // The real rows come first: cut the padding off.
  const std::int64_t real_t = batch.num_tokens(), real_logits = batch.num_logits();
  for (std::size_t c = 0; c < out.layer_inputs.size(); ++c) out.layer_inputs[c] = captures_[c].view(DType::kF32, {real_t, h});
  if (batch.capture_final_hidden) out.final_hidden = final_hidden_.view(DType::kF32, {real_t, h});
  out.logits = logits_.view(DType::kF32, {real_logits, config_.vocab_size});
  return out;
}

void Transformer::enqueue_forward(const ForwardBatch& batch, KvCache& kv_cache, StateCache* state_cache,
                                  std::int64_t t, std::int64_t n_logits, const ForwardOutput& out) {
  const std::int64_t h = config_.hidden_size;
  const TensorView residual = residual_.view(DType::kF32, {t, h});
  backend_.embedding(weights_.embed, plan_.tokens(), residual);
  backend_.rope_cos_sin(plan_.positions(),
                        inv_freq_.view(DType::kF32, {config_.rope_dim() / 2}),
                        cos_sin_.view(DType::kF32, {t, config_.rope_dim()}));
  for (std::int32_t i = 0; i < config_.num_layers; ++i) {
    layer_forward(i, t, kv_cache, state_cache, batch, out);
    if (const std::int32_t kv = kv_index_[static_cast<std::size_t>(i)]; batch.on_layer_written && kv >= 0) {
      backend_.synchronize();
      batch.on_layer_written(kv);
    }
  }
  // The last layer's MLP output.
  if (config_.num_layers > 0) backend_.add(residual, layer_workspace_.views(config_, t).hidden, residual);

  const TensorView rows = plan_.logits_rows();
  const TensorView selected = selected_.view(DType::kF32, {n_logits, h});
  if (batch.capture_final_hidden) {
    backend_.rms_norm(residual, weights_.final_norm, config_.rms_norm_eps, out.final_hidden);
    if (n_logits > 0) backend_.gather_rows(out.final_hidden, rows, selected);
  } else if (n_logits > 0) {
    backend_.gather_rows(residual, rows, selected);
    backend_.rms_norm(selected, weights_.final_norm, config_.rms_norm_eps, selected);
  }
  if (n_logits > 0) backend_.linear(selected, weights_.lm_head, TensorView{}, out.logits);
}

}  // namespace baton
