// Philox4x32-10 (Salmon et al., SC 2011), the counter-based generator behind every random number
// the engine draws (engine/sample/random.h says which keys it uses). One definition for the host
// and CUDA kernels, so a GPU sampler draws exactly the CPU's uniforms. Plain C++17, no state.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BATON_HOST_DEVICE __host__ __device__
#else
#define BATON_HOST_DEVICE
#endif

namespace baton {

// The purpose word of the stream that samples a token (engine/sample/random.h's
// RandomPurpose::kToken, which static_asserts the match).
inline constexpr std::uint32_t kPhiloxTokenPurpose = 1;

struct Philox4x32 {
  std::uint32_t v[4];
};

// One block: 4 x 32 random bits for a 128-bit counter under a 64-bit key (Random123's constants).
BATON_HOST_DEVICE inline Philox4x32 philox4x32_10_block(Philox4x32 c, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
  constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c.v[2];
    c = Philox4x32{{static_cast<std::uint32_t>(p1 >> 32) ^ c.v[1] ^ key0, static_cast<std::uint32_t>(p1),
                    static_cast<std::uint32_t>(p0 >> 32) ^ c.v[3] ^ key1, static_cast<std::uint32_t>(p0)}};
  }
  return c;
}

// Uniform number `index` of the stream (seed, purpose, position): counter {index, position low,
// position high, purpose}, key = seed; 53 random bits k mapped to (k + 1) / 2^53, in (0, 1].
BATON_HOST_DEVICE inline double philox_uniform(std::uint64_t seed, std::uint32_t purpose, std::int64_t position,
                                               std::uint32_t index) {
  const auto pos = static_cast<std::uint64_t>(position);
  const Philox4x32 bits = philox4x32_10_block(
      Philox4x32{{index, static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(pos >> 32), purpose}},
      static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const std::uint64_t word = (static_cast<std::uint64_t>(bits.v[0]) << 32) | bits.v[1];
  return static_cast<double>((word >> 11) + 1) * 0x1.0p-53;
}

}  // namespace baton
