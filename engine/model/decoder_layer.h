// decoder_layer: one pre-norm decoder layer (attention with RoPE over paged KV, then the SiLU MLP
// or a mixture of SiLU experts), on any Backend. Shared by the target Transformer and the draft
// heads (EAGLE-1/3, MTP), which feed it differently shaped attention inputs: the normalized
// residual for a plain layer, the residual itself for EAGLE-1, cat(norm(embedding), norm(hidden))
// of width 2H for EAGLE-3.
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
  TensorView qkv;      // [T, q_size + 2 kv_size]
  TensorView attn;     // [T, heads, head_dim]
  TensorView gate_up;  // [T, 2 intermediate]
  TensorView act;      // [T, intermediate]
  // Models with experts only (empty otherwise).
  TensorView router_logits;  // [T, num_experts]
  MoeScratch moe;            // T * num_experts_per_tok rows
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
};

// Per-batch inputs every layer shares.
struct LayerBatch {
  TensorView cos_sin;     // [T, head_dim]
  TensorView slots;       // [T] I32 KV slots of the new tokens
  AttentionBatch attention;
};

// residual += attention(attn_input); residual += mlp(post_norm(residual)), the MLP being the
// layer's experts when it has a router (Backend::moe).
// attn_input: [T, in] (in = the width w.qkv expects); residual: [T, hidden]; kv_layer: this
// layer's pool [blocks, 2, block_size, kv_heads, head_dim]. With add_mlp_output false the MLP's
// output is left in s.hidden instead of added, for the caller to add in one pass with the norm
// that follows (Backend::add_rms_norm).
void decoder_layer(Backend& b, const ModelConfig& c, const LayerWeights& w, std::int32_t sliding_window,
                   const TensorView& attn_input, const TensorView& residual, const LayerScratch& s,
                   const LayerBatch& lb, const TensorView& kv_layer, bool add_mlp_output = true);

}  // namespace baton
