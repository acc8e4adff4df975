// Device-side fills for bench/gpu/llama_decode_bench: random BF16 weights and F32 values made by a
// counter-based hash on the GPU, so an 8B-parameter model costs milliseconds to create and no host
// memory or transfer at all.
//
// Must not: allocate, synchronize, or use a host-side random generator. Every launch goes to the
// legacy default stream; callers synchronize the device before other streams read the result.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace baton::bench {

// dst[i] = bf16(uniform(-scale, scale)) from (seed, i). dst: n BF16 values (2 bytes each).
cudaError_t fill_bf16_uniform(void* dst, std::size_t n, float scale, std::uint64_t seed);
// dst[i] = uniform(-scale, scale) from (seed, i).
cudaError_t fill_f32_uniform(float* dst, std::size_t n, float scale, std::uint64_t seed);
// dst[i] = value.
cudaError_t fill_f32_constant(float* dst, std::size_t n, float value);

}  // namespace baton::bench
