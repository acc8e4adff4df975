// Host memory layout: big buffers on huge-page boundaries; small packed weights side by side in
// shared slabs that are released (or reused) once every piece is freed.
#include "kernels/cpu/host_memory.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace baton::cpu {
namespace {

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(HostMemory, BigBuffersStartOnAHugePageAndSmallOnesOnACacheLine) {
  void* big = allocate_host(kHugePageBytes + 123);
  void* small = allocate_host(1000);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(addr(big) % kHugePageBytes, 0u);
  EXPECT_EQ(addr(small) % 64, 0u);
  std::memset(big, 1, kHugePageBytes + 123);  // all of it is usable
  free_host(big);
  free_host(small);
}

TEST(WeightSlabs, PiecesAreAlignedDisjointAndPackedInOrder) {
  WeightSlabs slabs;
  std::vector<std::pair<char*, std::size_t>> pieces;
  for (std::size_t bytes : {100u, 64u, 1000u, 4096u, 1u, 70000u}) {
    auto* p = static_cast<char*>(slabs.allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % 64, 0u);
    std::memset(p, 0x5a, bytes);
    pieces.emplace_back(p, bytes);
  }
  for (std::size_t i = 1; i < pieces.size(); ++i) {
    // In load order, each right after the previous (rounded to a cache line): one stream.
    const std::size_t prev = (pieces[i - 1].second + 63) / 64 * 64;
    EXPECT_EQ(pieces[i].first, pieces[i - 1].first + prev) << i;
  }
  EXPECT_EQ(addr(pieces[0].first) % kHugePageBytes, 0u);  // a slab starts on a huge page
  for (auto& [p, n] : pieces) EXPECT_TRUE(slabs.free(p));
}

TEST(WeightSlabs, RefusesPiecesItDoesNotOwnAndTooBigRequests) {
  WeightSlabs slabs;
  int outside = 0;
  EXPECT_FALSE(slabs.free(&outside));
  EXPECT_EQ(slabs.allocate(WeightSlabs::kMaxPieceBytes + 1), nullptr);
}

TEST(WeightSlabs, ASlabIsReleasedWhenItsLastPieceIsFreed) {
  WeightSlabs slabs;
  // Fill more than one slab with pieces just under the limit.
  const std::size_t piece = WeightSlabs::kMaxPieceBytes - 64;
  std::vector<void*> first_slab, rest;
  std::set<std::uintptr_t> slab_starts;
  for (int i = 0; i < 12; ++i) {
    void* p = slabs.allocate(piece);
    ASSERT_NE(p, nullptr);
    slab_starts.insert(addr(p) / WeightSlabs::kSlabBytes);
    (i < 4 ? first_slab : rest).push_back(p);
  }
  EXPECT_GE(slab_starts.size(), 3u);
  for (void* p : first_slab) EXPECT_TRUE(slabs.free(p));
  // Memory of a released slab is no longer a piece.
  EXPECT_FALSE(slabs.free(first_slab[0]));
  for (void* p : rest) EXPECT_TRUE(slabs.free(p));
  // The open slab is kept and reused from its start.
  void* again = slabs.allocate(100);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(addr(again) % kHugePageBytes, 0u);
  EXPECT_TRUE(slabs.free(again));
}

TEST(WeightSlabs, TheBackendPacksSmallWeightsIntoSlabsAndFreesThem) {
  BackendOptions o;
  o.num_threads = 1;
  auto backend = CpuBackend::create(o);
  ASSERT_TRUE(backend.ok());
  std::vector<float> w(64 * 32, 0.5f);
  const TensorView weight = TensorView::contiguous(w.data(), DType::kF32, {64, 32}, (*backend)->device());
  TensorView packed_a, packed_b;
  auto a = (*backend)->pack_linear_weight(weight, &packed_a);
  auto b = (*backend)->pack_linear_weight(weight, &packed_b);
  ASSERT_TRUE(a.ok() && b.ok());
  // Two 8 KiB packed copies, back to back in one slab.
  EXPECT_EQ(static_cast<char*>(b->data()), static_cast<char*>(a->data()) + a->bytes());
  // Freed through DeviceBuffer, as the loader does; the backend must not crash or leak (ASan).
  *a = DeviceBuffer();
  *b = DeviceBuffer();
}

}  // namespace
}  // namespace baton::cpu
