// Host memory for the CPU backend's buffers, laid out for streaming.
//
// allocate_host(): buffers of a huge page or more (weights, KV pools, workspaces) start on a 2 MiB
// boundary, ask the kernel for transparent huge pages (streaming them then misses the TLB far
// less; without THP the memory is the same, in small pages) and are populated at once: the
// memory is committed up front, so a budget the machine cannot hold fails at start-up instead of
// mid-request, and no step ever page-faults (a fresh KV pool would otherwise fault block by block
// until all of it had been written once: with prefix caching, free blocks are used before cached
// ones). Smaller buffers are 64-byte aligned and left to the allocator.
//
// WeightSlabs: packed weights smaller than a huge page (a small model's matrices) are placed side
// by side, in load order, in shared huge-page slabs, so that a small model's weights, too, stream
// through a handful of huge pages. A slab is released when its last piece is freed.
// Neither knows about tensors or kernels; both are thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace baton::cpu {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;  // x86-64 transparent huge page

// nullptr when the memory is not there. Release with free_host().
void* allocate_host(std::size_t bytes);
void free_host(void* p);

class WeightSlabs {
 public:
  static constexpr std::size_t kSlabBytes = 4 * kHugePageBytes;
  static constexpr std::size_t kMaxPieceBytes = kHugePageBytes;  // larger buffers use allocate_host()

  WeightSlabs() = default;
  WeightSlabs(const WeightSlabs&) = delete;
  WeightSlabs& operator=(const WeightSlabs&) = delete;
  ~WeightSlabs();

  // A 64-byte aligned piece of `bytes` < kMaxPieceBytes; nullptr when the memory is not there.
  void* allocate(std::size_t bytes);
  // Frees p if it is a piece of a slab (true); false (and nothing done) otherwise.
  bool free(void* p);

 private:
  struct Slab {
    char* base = nullptr;
    std::size_t used = 0;  // bytes handed out from the start
    int live = 0;          // pieces not yet freed
  };
  std::mutex mu_;
  std::vector<Slab> slabs_;  // the last one takes new pieces
};

}  // namespace baton::cpu
