// FenceRing: which event slot a fence id names, for fences recorded on several streams.
//
// CudaBackend's fences are CUDA events recorded on its streams, from a fixed ring of slots per
// stream (events are reused, not created per fence). Waiting on a fence whose slot has since been
// recorded again waits for that later record instead. That is safe only when the later record is on
// the SAME stream (a later point of one stream comes after every earlier point of it). One ring
// shared by two streams is not: with 32 slots, fence f on the copy stream and fence f + 32 on the
// compute stream share a slot, and waiting on f then waits for the compute stream alone, which
// says nothing about f's copies. So each stream has its own ring, and the id says which:
//   id = sequence * kStreams + stream + 1   (0 is "no fence"; sequence counts per stream)
//
// Host bookkeeping only (no CUDA calls), so tests check it without a GPU.
//
// Must not: hand out a slot whose latest record is on another stream, or id 0.
#pragma once

#include <array>
#include <cstdint>

namespace baton::cuda {

template <int kStreams, int kSlotsPerStream>
class FenceRing {
  static_assert(kStreams > 0 && kSlotsPerStream > 0);

 public:
  struct Slot {
    int stream = 0;  // [0, kStreams)
    int index = 0;   // [0, kSlotsPerStream)
  };

  // The id of the next fence on `stream`; *slot is where its event is recorded.
  std::uint64_t next(int stream, Slot* slot) {
    const std::uint64_t sequence = next_sequence_[static_cast<std::size_t>(stream)]++;
    const std::uint64_t id = sequence * kStreams + static_cast<std::uint64_t>(stream) + 1;
    *slot = slot_of(id);
    return id;
  }

  // The slot fence `id` (non-zero, from next()) was recorded in. Its latest record is `id` itself
  // or a later fence of the same stream.
  static Slot slot_of(std::uint64_t id) {
    const std::uint64_t k = id - 1;
    return Slot{static_cast<int>(k % kStreams), static_cast<int>((k / kStreams) % kSlotsPerStream)};
  }

  // The per-stream position of fence `id` (0 for a stream's first fence).
  static std::uint64_t sequence_of(std::uint64_t id) { return (id - 1) / kStreams; }

 private:
  std::array<std::uint64_t, kStreams> next_sequence_{};
};

}  // namespace baton::cuda
