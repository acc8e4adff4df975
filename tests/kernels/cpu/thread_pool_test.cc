#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace baton::cpu {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (std::int64_t n : {0, 1, 2, 7, 64, 1001}) {
      for (std::int64_t align : {1, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        pool.parallel_for(n, 1, align, [&](std::int64_t b, std::int64_t e) {
          EXPECT_EQ(b % align, 0);
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, n=" << n;
      }
    }
  }
}

TEST(ThreadPool, ManyShortRegionsAllComplete) {
  ThreadPool pool(3);
  std::atomic<std::int64_t> total{0};
  for (int i = 0; i < 20000; ++i) {
    pool.run([&](int worker) { total += worker + 1; });
  }
  EXPECT_EQ(total.load(), 20000 * (1 + 2 + 3));
}

TEST(ThreadPool, WorkersWakeAfterSleeping) {
  ThreadPool pool(2);
  std::atomic<int> seen{0};
  pool.run([&](int) { seen++; });
  // Idle long enough for the worker to go to sleep, measured by its own deadline; a region after
  // that must still run on every worker.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pool.run([&](int) { seen++; });
  EXPECT_EQ(seen.load(), 4);
}

}  // namespace
}  // namespace baton::cpu
