// Measures this machine's memory read bandwidth the way a decode step reads weights: every thread
// of the pool streams its own contiguous slice of a buffer much larger than the caches.
#pragma once

#include <cstddef>

#include "kernels/cpu/thread_pool.h"

namespace baton::bench {

struct BandwidthResult {
  double bytes_per_second = 0;  // median over repetitions
  double best_bytes_per_second = 0;
  std::size_t buffer_bytes = 0;
};

BandwidthResult measure_read_bandwidth(cpu::ThreadPool& pool, std::size_t buffer_bytes, int repetitions);

}  // namespace baton::bench
