// Rotary position embedding on CUDA: the cos/sin table for a step's positions, and the in-place
// "rotate half" rotation of query/key heads. Semantics are the CPU twins'
// (Backend::rope_cos_sin / apply_rope in kernels/backend.h).
#pragma once

#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

// cos_sin[t, i] = cos(positions[t] * inv_freq[i]), cos_sin[t, half + i] = sin(...), i < half.
// positions: [tokens] I32; inv_freq: [half] F32; cos_sin: [tokens, 2 * half] F32 contiguous.
cudaError_t rope_cos_sin(const std::int32_t* positions, std::int64_t tokens, const float* inv_freq, int half,
                         float* cos_sin, cudaStream_t stream);

// For each (t, h) and i < head_dim / 2:
// (x[i], x[i + half]) <- (x[i] cos - x[i + half] sin, x[i + half] cos + x[i] sin),
// cos = cos_sin[t, i], sin = cos_sin[t, half + i]. cos_sin: [tokens, head_dim] contiguous.
cudaError_t apply_rope(HeadsArg x, const float* cos_sin, cudaStream_t stream);

}  // namespace baton::cuda
