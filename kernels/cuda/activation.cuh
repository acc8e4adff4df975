// CUDA SiLU·mul, the CUDA twin of CpuBackend::silu_mul. Also the CUDA toolchain's smoke target:
// it is built for sm_80 and sm_90 whenever nvcc is found, so CI proves the toolchain works.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace baton::cuda {

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i].
// gate_up: [tokens, 2 * inter] f32, device; out: [tokens, inter] f32, device.
cudaError_t silu_mul_f32(const float* gate_up, float* out, std::int64_t tokens, std::int64_t inter,
                         cudaStream_t stream);

}  // namespace baton::cuda
