// Counter-based random numbers for sampling: every uniform a request uses is a pure function of
// (seed, purpose, position, index), computed with Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011; the generator cuRAND and PyTorch use on GPUs).
//
// Why counter-based: a request's tokens must depend only on its own inputs (model, prompt,
// sampling parameters, seed, speculative config) — not on the batch, the token budget, other
// requests, or which process ran its prefill. A stateful generator would make that depend on how
// many draws happened before; a keyed one needs no state to travel with a request, so a
// prefill/decode hand-off carries only the seed, and a GPU kernel draws the same numbers as the CPU.
//
// Keys used by the engine (position = index of the token being decided in prompt + output):
//   kToken   position p, index 0: the draw that samples token p in plain decoding; verification of
//            one-hot drafts uses exactly these, so it emits what plain decoding would have.
//   kVerify  position = first position a speculative step decides: the sequential stream of the
//            joint rules for probabilistic drafts (token-wise and block verification).
//   kDraft   position = the same: the stream probabilistic drafts are sampled from.
// Each speculative step starts at a strictly larger position than the one before, so no stream is
// reused for another decision. Must not hold per-request state beyond the seed.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/philox.h"

namespace baton {

// One Philox4x32-10 block: 4 x 32 random bits for a 128-bit counter under a 64-bit key.
std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key);

enum class RandomPurpose : std::uint32_t { kToken = 1, kVerify = 2, kDraft = 3 };
static_assert(static_cast<std::uint32_t>(RandomPurpose::kToken) == kPhiloxTokenPurpose);

// A sequence of uniforms in (0, 1] for one (seed, purpose, position); draw i uses counter
// {i, position low, position high, purpose} and key = seed. Cheap to create and copy.
class RandomStream {
 public:
  RandomStream(std::uint64_t seed, RandomPurpose purpose, std::int64_t position)
      : seed_(seed), purpose_(purpose), position_(position) {}

  // 53 random bits k mapped to (k + 1) / 2^53: never 0, so `u <= p` is false for p = 0.
  double uniform();
  std::uint32_t draws() const { return index_; }

 private:
  std::uint64_t seed_;
  RandomPurpose purpose_;
  std::int64_t position_;
  std::uint32_t index_ = 0;
};

// The stream that decides token `position` in plain sampling.
inline RandomStream token_stream(std::uint64_t seed, std::int64_t position) {
  return RandomStream(seed, RandomPurpose::kToken, position);
}

}  // namespace baton
