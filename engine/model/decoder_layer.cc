#include "engine/model/decoder_layer.h"

#include <cmath>

#include "engine/model/linear_attention.h"
#include "engine/model/mamba2_mixer.h"

namespace baton {
namespace {

std::int64_t qkv_width(const ModelConfig& c) {
  return c.q_size() * (c.attn_output_gate ? 2LL : 1LL) + 2LL * c.kv_size();
}

// The recurrent mixer's scratch widths (a model's recurrent layers are all of one kind): its
// input projection, its convolution's output, and its recurrence's output (heads x head dim).
struct RecurrentWidths {
  std::int64_t projected = 0, mixed = 0, heads = 0, head_dim = 0;
};

RecurrentWidths recurrent_widths(const ModelConfig& c) {
  if (c.num_recurrent_layers() == 0) return {};
  if (c.has_mamba2_layers()) {
    const Mamba2Config& m = c.mamba2;
    return {m.projection_width(), m.conv_channels(), m.num_heads, m.head_dim};
  }
  const LinearAttentionConfig& la = c.linear_attention;
  return {la.projection_width(), la.conv_channels(), la.num_value_heads, la.value_head_dim};
}

// out = o_proj(attention(x)), gated by sigmoid(gate) first when the layer has an output gate.
void attention(Backend& b, const ModelConfig& c, const LayerWeights& w, std::int32_t sliding_window,
               const TensorView& x, const LayerScratch& s, const LayerBatch& lb, const TensorView& kv_layer,
               const TensorView& out) {
  const std::int64_t q = c.q_size(), kv = c.kv_size();
  const TensorView q_heads = s.qkv.slice_last(0, q).split_last(c.num_heads);
  const TensorView k_heads = s.qkv.slice_last(q, q + kv).split_last(c.num_kv_heads);
  const TensorView v_heads = s.qkv.slice_last(q + kv, q + 2 * kv).split_last(c.num_kv_heads);
  const std::int64_t t = x.dim(0);

  b.linear(x, w.qkv, w.qkv_bias, s.qkv);
  if (c.qk_norm) {
    b.rms_norm(q_heads, w.q_norm, c.rms_norm_eps, q_heads);
    b.rms_norm(k_heads, w.k_norm, c.rms_norm_eps, k_heads);
  }
  // Query and key heads are adjacent in qkv: one rotation over both (over each head's first
  // rope_dim dims when the rotary is partial).
  if (c.rope) {  // Nemotron-H's attention has no positional encoding
    TensorView rotated = s.qkv.slice_last(0, q + kv).split_last(c.num_heads + c.num_kv_heads);
    if (c.rope_dim() < c.head_dim) rotated = rotated.slice_last(0, c.rope_dim());
    b.apply_rope(rotated, lb.cos_sin);
  }
  b.write_kv(k_heads, v_heads, lb.slots, kv_layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  b.paged_attention(q_heads, kv_layer, lb.attention, scale, sliding_window, s.attn);
  const TensorView attn = s.attn.reshape({t, q});
  if (c.attn_output_gate) b.sigmoid_mul(attn, s.qkv.slice_last(q + 2 * kv, 2 * q + 2 * kv), attn);
  b.linear(attn, w.o_proj, w.o_bias, out);
}

}  // namespace

absl::Status LayerWorkspace::allocate(Backend& backend, const ModelConfig& c, std::int64_t max_tokens) {
  const auto t = static_cast<std::size_t>(max_tokens) * sizeof(float);
  const RecurrentWidths r = recurrent_widths(c);
  const std::pair<DeviceBuffer*, std::int64_t> buffers[] = {
      {&hidden_, c.hidden_size}, {&qkv_, qkv_width(c)}, {&attn_, c.q_size()},
      {&gate_up_, 2LL * c.intermediate_size}, {&act_, c.intermediate_size},
      {&projected_, r.projected}, {&mixed_, r.mixed}, {&core_, r.heads * r.head_dim}};
  for (const auto& [buffer, width] : buffers) {
    if (width == 0) continue;
    auto b = backend.allocate(t * static_cast<std::size_t>(width));
    if (!b.ok()) return b.status();
    *buffer = std::move(*b);
  }
  if (!c.has_experts()) return absl::OkStatus();
  const std::int64_t pairs = max_tokens * c.num_experts_per_tok;
  const std::pair<DeviceBuffer*, std::int64_t> moe[] = {
      {&router_logits_, max_tokens * c.num_experts}, {&moe_rows_, pairs * c.hidden_size},
      {&moe_gate_up_, pairs * 2LL * c.moe_intermediate_size}, {&moe_act_, pairs * c.moe_intermediate_size},
      {&moe_out_, pairs * c.hidden_size}};
  const std::int64_t shared = c.shared_expert_intermediate_size;
  const std::pair<DeviceBuffer*, std::int64_t> shared_buffers[] = {
      {&shared_gate_up_, max_tokens * 2 * shared}, {&shared_act_, max_tokens * shared},
      {&shared_out_, shared > 0 ? max_tokens * c.hidden_size : 0}, {&shared_logit_, shared > 0 ? max_tokens : 0}};
  for (const auto& [buffer, floats] : moe) {
    auto b = backend.allocate(static_cast<std::size_t>(floats) * sizeof(float));
    if (!b.ok()) return b.status();
    *buffer = std::move(*b);
  }
  for (const auto& [buffer, floats] : shared_buffers) {
    if (floats == 0) continue;
    auto b = backend.allocate(static_cast<std::size_t>(floats) * sizeof(float));
    if (!b.ok()) return b.status();
    *buffer = std::move(*b);
  }
  return absl::OkStatus();
}

LayerScratch LayerWorkspace::views(const ModelConfig& c, std::int64_t t) const {
  LayerScratch s;
  s.hidden = hidden_.view(DType::kF32, {t, c.hidden_size});
  s.qkv = qkv_.view(DType::kF32, {t, qkv_width(c)});
  if (const RecurrentWidths r = recurrent_widths(c); r.projected > 0) {
    s.projected = projected_.view(DType::kF32, {t, r.projected});
    s.mixed = mixed_.view(DType::kF32, {t, r.mixed});
    s.core = core_.view(DType::kF32, {t, r.heads, r.head_dim});
  }
  s.attn = attn_.view(DType::kF32, {t, c.num_heads, c.head_dim});
  s.gate_up = gate_up_.view(DType::kF32, {t, 2LL * c.intermediate_size});
  s.act = act_.view(DType::kF32, {t, c.intermediate_size});
  if (c.has_experts()) {
    const std::int64_t pairs = t * c.num_experts_per_tok;
    s.router_logits = router_logits_.view(DType::kF32, {t, c.num_experts});
    s.moe.rows = moe_rows_.view(DType::kF32, {pairs, c.hidden_size});
    s.moe.gate_up = moe_gate_up_.view(DType::kF32, {pairs, 2LL * c.moe_intermediate_size});
    s.moe.act = moe_act_.view(DType::kF32, {pairs, c.moe_intermediate_size});
    s.moe.out = moe_out_.view(DType::kF32, {pairs, c.hidden_size});
    if (const std::int64_t shared = c.shared_expert_intermediate_size; shared > 0) {
      s.moe.shared_gate_up = shared_gate_up_.view(DType::kF32, {t, 2 * shared});
      s.moe.shared_act = shared_act_.view(DType::kF32, {t, shared});
      s.moe.shared_out = shared_out_.view(DType::kF32, {t, c.hidden_size});
      s.moe.shared_logit = shared_logit_.view(DType::kF32, {t, 1});
    }
  }
  return s;
}

void decoder_layer(Backend& b, const ModelConfig& c, const LayerWeights& w, std::int32_t sliding_window,
                   const TensorView& attn_input, const TensorView& residual, const LayerScratch& s,
                   const LayerBatch& lb, const LayerCache& cache, bool add_mlp_output) {
  switch (w.mixer) {
    case MixerKind::kLinearAttention:
      linear_attention(b, c, w, attn_input, s, lb.recurrent, cache, s.hidden);
      break;
    case MixerKind::kMamba2:
      mamba2_mixer(b, c, w, attn_input, s, lb.recurrent, cache, s.hidden);
      break;
    case MixerKind::kAttention:
      attention(b, c, w, sliding_window, attn_input, s, lb, cache.kv, s.hidden);
      break;
    case MixerKind::kNone:  // a Nemotron-H MLP block: the MLP reads the block's normed input
      break;
  }
  if (!w.has_mlp()) {  // a one-sublayer block whose sublayer was the mixer
    if (add_mlp_output) b.add(residual, s.hidden, residual);
    return;
  }
  if (w.mixer == MixerKind::kNone) {
    if (attn_input.data != s.hidden.data) b.copy(attn_input, s.hidden);
  } else {
    b.add_rms_norm(residual, s.hidden, w.post_norm, c.rms_norm_eps, s.hidden);
  }
  if (!w.up.empty()) {  // relu² MLP
    b.linear(s.hidden, w.up, TensorView{}, s.act);
    b.relu_squared(s.act, s.act);
    b.linear(s.act, w.down, TensorView{}, s.hidden);
  } else if (!w.router.empty()) {
    b.linear(s.hidden, w.router, TensorView{}, s.router_logits);
    b.moe(s.hidden, s.router_logits, w.experts, s.moe, s.hidden);
  } else {
    b.linear(s.hidden, w.gate_up, TensorView{}, s.gate_up);
    b.silu_mul(s.gate_up, s.act);
    b.linear(s.act, w.down, TensorView{}, s.hidden);
  }
  if (add_mlp_output) b.add(residual, s.hidden, residual);
}

}  // namespace baton
