// mamba2_mixer: Nemotron-H's Mamba-2 token mixer on any Backend — the input projection (z, then x,
// B and C, then dt), the short causal convolution over x, B and C (with its bias), the selective
// state-space recurrence over each request's state, the gate-first grouped RMSNorm and the output
// projection. The state lives in the StateCache (engine/kv/state_cache.h); which slot a sequence
// reads and which it writes is RecurrentBatch's (kernels/backend.h).
//
// Must not: hold state of its own between forwards, or read a KV cache.
#pragma once

#include "engine/model/config.h"
#include "engine/model/decoder_layer.h"
#include "engine/model/weights.h"
#include "kernels/backend.h"

namespace baton {

// out = out_proj(gated_group_norm(ssd(conv(x, B, C), dt), z)) for x: [T, hidden] into out:
// [T, hidden], reading and writing the sequences' states in cache.conv_state and
// cache.recurrent_state. Uses s.projected, s.mixed and s.core.
void mamba2_mixer(Backend& b, const ModelConfig& c, const LayerWeights& w, const TensorView& x, const LayerScratch& s,
                  const RecurrentBatch& batch, const LayerCache& cache, const TensorView& out);

}  // namespace baton
