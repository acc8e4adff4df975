// The CUDA backend's host-side bookkeeping, checked without a GPU: the fence ring's slot
// assignment (kernels/cuda/fence_ring.h) and the per-thread device binding
// (kernels/cuda/device_binding.h), the latter against a fake runtime whose "current device" is
// per thread, as the CUDA runtime's is.
#include <cstdint>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/device_binding.h"
#include "kernels/cuda/fence_ring.h"

namespace baton::cuda {
namespace {

using Ring = FenceRing<2, 32>;

TEST(FenceRing, IdsAreNonZeroAndNameTheirStream) {
  Ring ring;
  Ring::Slot slot;
  for (int i = 0; i < 100; ++i) {
    const int stream = i % 3 == 0 ? 1 : 0;
    const std::uint64_t id = ring.next(stream, &slot);
    EXPECT_NE(id, 0u);
    EXPECT_EQ(slot.stream, stream);
    EXPECT_EQ(Ring::slot_of(id).stream, stream);
    EXPECT_EQ(Ring::slot_of(id).index, slot.index);
  }
}

// The guarantee a wait relies on: the latest event recorded in fence f's slot is f itself or a
// LATER fence of the SAME stream. One ring shared by two streams broke this as soon as 32 fences
// were outstanding: the slot of a copy-stream fence was re-recorded by a compute-stream fence.
TEST(FenceRing, ASlotIsOnlyEverReRecordedLaterOnTheSameStream) {
  Ring ring;
  std::mt19937 rng(7);
  std::map<std::pair<int, int>, std::uint64_t> last_in_slot;  // slot -> latest fence recorded there
  std::map<std::uint64_t, std::pair<int, int>> recorded;      // fence -> (stream, its place on that stream)
  int per_stream[2] = {0, 0};
  std::vector<std::uint64_t> outstanding;
  for (int i = 0; i < 5000; ++i) {
    const int stream = static_cast<int>(rng() % 2);
    Ring::Slot slot;
    const std::uint64_t id = ring.next(stream, &slot);
    ASSERT_TRUE(recorded.emplace(id, std::make_pair(stream, per_stream[stream]++)).second) << "id " << id << " reused";
    last_in_slot[{slot.stream, slot.index}] = id;
    outstanding.push_back(id);
    // Up to 200 fences outstanding, far more than the 32 slots of a ring.
    for (std::size_t j = outstanding.size() > 200 ? outstanding.size() - 200 : 0; j < outstanding.size(); ++j) {
      const std::uint64_t f = outstanding[j];
      const Ring::Slot s = Ring::slot_of(f);
      const std::uint64_t latest = last_in_slot.at({s.stream, s.index});
      ASSERT_EQ(recorded.at(latest).first, recorded.at(f).first)
          << "fence " << f << "'s slot was re-recorded on another stream (after " << i << " fences)";
      ASSERT_GE(recorded.at(latest).second, recorded.at(f).second) << "fence " << f;
    }
  }
}

// A fake CUDA runtime: each thread starts on device 0, as with the real one.
thread_local int fake_current_device = 0;
int fake_get(int* device) {
  *device = fake_current_device;
  return 0;
}
int fake_set(int device) {
  if (device < 0 || device > 3) return 101;  // cudaErrorInvalidDevice
  fake_current_device = device;
  return 0;
}

TEST(DeviceBinding, EveryThreadThatBindsRunsOnTheBackendsDevice) {
  const DeviceBinding binding(2, DeviceRuntime{fake_get, fake_set});
  ASSERT_EQ(binding.bind(), 0);
  EXPECT_EQ(fake_current_device, 2);
  // Another thread (the engine loop, a transport) starts on device 0: binding moves it.
  int seen_before = -1, seen_after = -1;
  std::thread other([&] {
    seen_before = fake_current_device;
    EXPECT_EQ(binding.bind(), 0);
    seen_after = fake_current_device;
  });
  other.join();
  EXPECT_EQ(seen_before, 0);
  EXPECT_EQ(seen_after, 2);
  EXPECT_EQ(binding.switches(), 2u);
  // A thread already on the device is left alone; one moved away by other code is moved back.
  EXPECT_EQ(binding.bind(), 0);
  EXPECT_EQ(binding.switches(), 2u);
  fake_current_device = 1;
  EXPECT_EQ(binding.bind(), 0);
  EXPECT_EQ(fake_current_device, 2);
  EXPECT_EQ(binding.switches(), 3u);
}

TEST(DeviceBinding, ARuntimeErrorComesBack) {
  const DeviceBinding binding(9, DeviceRuntime{fake_get, fake_set});
  EXPECT_EQ(binding.bind(), 101);
}

}  // namespace
}  // namespace baton::cuda
