#include "kernels/cpu/host_memory.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

namespace baton::cpu {
namespace {

constexpr std::size_t kCacheLine = 64;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void* allocate_host(std::size_t bytes) {
  const bool huge = bytes >= kHugePageBytes;
  const std::size_t align = huge ? kHugePageBytes : kCacheLine;
  const std::size_t rounded = round_up(bytes == 0 ? 1 : bytes, align);
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr || !huge) return p;
  (void)madvise(p, rounded, MADV_HUGEPAGE);
  // Commit it now. Kernels without MADV_POPULATE_WRITE (before 5.14) get the same by writing.
  if (madvise(p, rounded, MADV_POPULATE_WRITE) != 0) {
    if (errno != EINVAL) {  // ENOMEM and the like: the memory is not there
      std::free(p);
      return nullptr;
    }
    std::memset(p, 0, rounded);
  }
  return p;
}

void free_host(void* p) { std::free(p); }

WeightSlabs::~WeightSlabs() {
  for (Slab& s : slabs_) free_host(s.base);
}

void* WeightSlabs::allocate(std::size_t bytes) {
  const std::size_t need = round_up(bytes == 0 ? 1 : bytes, kCacheLine);
  if (need > kMaxPieceBytes) return nullptr;
  const std::lock_guard<std::mutex> lock(mu_);
  if (slabs_.empty() || slabs_.back().used + need > kSlabBytes) {
    auto* base = static_cast<char*>(allocate_host(kSlabBytes));
    if (base == nullptr) return nullptr;
    slabs_.push_back(Slab{base, 0, 0});
  }
  Slab& s = slabs_.back();
  void* p = s.base + s.used;
  s.used += need;
  ++s.live;
  return p;
}

bool WeightSlabs::free(void* p) {
  const std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < slabs_.size(); ++i) {
    Slab& s = slabs_[i];
    if (static_cast<char*>(p) < s.base || static_cast<char*>(p) >= s.base + kSlabBytes) continue;
    if (--s.live == 0) {
      if (i + 1 == slabs_.size()) {
        s.used = 0;  // the open slab: keep it for the next pieces
      } else {
        free_host(s.base);
        slabs_.erase(slabs_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    return true;
  }
  return false;
}

}  // namespace baton::cpu
