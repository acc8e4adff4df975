// Measures how fast this machine reads a buffer the way a decode step reads its weights: every
// thread of the pool streams its own contiguous slice, again and again. Give it the weights' size:
// whatever share of that fits in the caches helps the probe exactly as it helps the model, so the
// resulting floor (bytes / bandwidth) is one the model could really reach.
#pragma once

#include <cstddef>
#include <memory>

#include "kernels/cpu/host_memory.h"
#include "kernels/cpu/thread_pool.h"

namespace baton::bench {

struct BandwidthResult {
  double bytes_per_second = 0;       // median over repetitions
  double best_bytes_per_second = 0;  // the fastest repetition: the floor uses this
  std::size_t buffer_bytes = 0;
};

// A float buffer from the CPU backend's own allocator (kernels/cpu/host_memory.h: huge pages when
// it is that large), so that probes and peers in a benchmark read memory on the same terms as the
// engine. Zero-filled.
class HugePageFloats {
 public:
  explicit HugePageFloats(std::size_t n);
  float* data() const { return p_.get(); }
  std::size_t size() const { return n_; }
  float& operator[](std::size_t i) const { return p_.get()[i]; }

 private:
  struct Free {
    void operator()(float* p) const { cpu::free_host(p); }
  };
  std::unique_ptr<float, Free> p_;
  std::size_t n_ = 0;
};

// A buffer of the given size, touched once by the pool's threads (first-touch placement), that
// measure() streams again and again, so that a benchmark can probe between its timed runs.
class ReadProbe {
 public:
  ReadProbe(cpu::ThreadPool& pool, std::size_t buffer_bytes);
  // The first pass warms up; the result covers the `repetitions` after it.
  BandwidthResult measure(int repetitions);

 private:
  cpu::ThreadPool& pool_;
  HugePageFloats buffer_;
  std::size_t bytes_;
};

}  // namespace baton::bench
