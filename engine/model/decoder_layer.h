// decoder_layer: one pre-norm decoder layer on any Backend: a token mixer — attention with RoPE
// over paged KV (optionally gated and partially rotary, Qwen3-Next; without RoPE, Nemotron-H), a
// Gated DeltaNet linear-attention recurrence (linear_attention.h) or a Mamba-2 mixer
// (mamba2_mixer.h) over the request's state — then the SiLU MLP, a mixture of SiLU experts, or
// the relu² MLP. A Nemotron-H block holds one of these only: a mixer, or the MLP alone. Shared by the target Transformer and the draft heads (EAGLE-1/3,
// MTP), which feed it differently shaped attention inputs: the normalized residual for a plain
// layer, the residual itself for EAGLE-1, cat(norm(embedding), norm(hidden)) of width 2H for
// EAGLE-3.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/backend.h"

namespace baton {

// Device views sized for the batch's tokens T. `hidden` may be the attention input itself.
struct LayerScratch {
  TensorView hidden;   // [T, hidden]
  TensorView qkv;      // [T, q_size + 2 kv_size (+ q_size: the output gate)]
  TensorView attn;     // [T, heads, head_dim]
  TensorView gate_up;  // [T, 2 intermediate]
  TensorView act;      // [T, intermediate]
  // Models with experts only (empty otherwise).
  TensorView router_logits;  // [T, num_experts]
  MoeScratch moe;            // T * num_experts_per_tok rows
  // Models with recurrent layers only.
  TensorView projected;  // [T, projection_width]: q, k, v, z, b, a (Mamba-2: z, x, B, C, dt)
  TensorView mixed;      // [T, conv_channels]: the convolved q, k, v (Mamba-2: x, B, C)
  TensorView core;       // [T, v_heads, value_head_dim] (Mamba-2: [T, heads, head_dim]): the
                         // recurrence's output, then gated and normed
};

// The scratch buffers of one decoder layer, allocated once for up to max_tokens tokens.
class LayerWorkspace {
 public:
  absl::Status allocate(Backend& backend, const ModelConfig& c, std::int64_t max_tokens);
  LayerScratch views(const ModelConfig& c, std::int64_t tokens) const;

 private:
  DeviceBuffer hidden_, qkv_, attn_, gate_up_, act_;
  DeviceBuffer router_logits_, moe_rows_, moe_gate_up_, moe_act_, moe_out_;
  DeviceBuffer shared_gate_up_, shared_act_, shared_out_, shared_logit_;
  DeviceBuffer projected_, mixed_, core_;
};

// Per-batch inputs every layer shares.
struct LayerBatch {
  TensorView cos_sin;     // [T, rope_dim]
  TensorView slots;       // [T] I32 KV slots of the new tokens
  AttentionBatch attention;
  RecurrentBatch recurrent;  // recurrent layers only
};

// What one layer caches: its KV pool (an attention layer) or its slice of the recurrent state
// cache (a recurrent layer).
struct LayerCache {
  TensorView kv;               // [blocks, 2, block_size, kv_heads, head_dim]
  TensorView conv_state;       // [groups, slots, ModelConfig::conv_state_floats()]
  TensorView recurrent_state;  // [groups, slots, ModelConfig::recurrent_state_floats()]
};

// residual += mixer(attn_input); residual += mlp(post_norm(residual)), the mixer being the layer's
// (LayerWeights::mixer), the MLP its experts when it has a router (Backend::moe). A layer without
// an MLP stops after the mixer (its output is the "MLP output" below); a layer without a mixer
// (kNone) runs its MLP on attn_input.
// attn_input: [T, in] (in = the width w.qkv expects); residual: [T, hidden]. With add_mlp_output
// false the MLP's output is left in s.hidden instead of added, for the caller to add in one pass
// with the norm that follows (Backend::add_rms_norm).
void decoder_layer(Backend& b, const ModelConfig& c, const LayerWeights& w, std::int32_t sliding_window,
                   const TensorView& attn_input, const TensorView& residual, const LayerScratch& s,
                   const LayerBatch& lb, const LayerCache& cache, bool add_mlp_output = true);

}  // namespace baton
