// linear_attention: Qwen3-Next's Gated DeltaNet token mixer on any Backend — the input
// projection, the short causal convolution over q, k and v, the gated delta rule over each
// request's recurrent state, the gated RMSNorm and the output projection. The state lives in
// the StateCache (engine/kv/state_cache.h); which slot a sequence reads and which it writes is
// RecurrentBatch's (kernels/backend.h).
//
// Must not: hold state of its own between forwards, or read a KV cache.
#pragma once

#include "engine/model/config.h"
#include "engine/model/decoder_layer.h"
#include "engine/model/weights.h"
#include "kernels/backend.h"

namespace baton {

// out = out_proj(gated_norm(delta_rule(conv(q, k, v)), z)) for x: [T, hidden] into out:
// [T, hidden], reading and writing the sequences' states in cache.conv_state and
// cache.recurrent_state. Uses s.projected, s.mixed and s.core.
void linear_attention(Backend& b, const ModelConfig& c, const LayerWeights& w, const TensorView& x,
                      const LayerScratch& s, const RecurrentBatch& batch, const LayerCache& cache,
                      const TensorView& out);

}  // namespace baton
