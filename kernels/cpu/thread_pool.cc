#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace baton::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// How long an idle worker spins before sleeping: long enough to bridge the gap between two ops of a
// forward pass, short enough not to burn a core between requests.
constexpr auto kSpinTime = std::chrono::microseconds(500);

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  size_ = num_threads > 0 ? num_threads : available_cores();
  threads_.reserve(static_cast<std::size_t>(size_ - 1));
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    sleep_cv_.notify_all();
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(FunctionRef<void(int)> fn) {
  if (size_ == 1) {
    fn(0);
    return;
  }
  std::lock_guard<std::mutex> submit(submit_mu_);
  job_ = &fn;
  pending_.store(size_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes job_ and orders against the sleepers_ load
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    sleep_cv_.notify_all();
  }
  fn(0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 2000) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a worker was descheduled; let it run
    }
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  while (true) {
    auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    for (int spins = 0;; ++spins) {
      if (generation_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_relaxed)) break;
      if ((spins & 255) == 255) {
        // Give the core away now and then: when threads outnumber free cores, the thread we are
        // waiting for may be queued behind us.
        std::this_thread::yield();
      }
      if ((spins & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleepers_.fetch_add(1);
        sleep_cv_.wait(lock, [&] { return generation_.load() != seen || stop_.load(); });
        sleepers_.fetch_sub(1);
        deadline = std::chrono::steady_clock::now() + kSpinTime;
      }
      cpu_relax();
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    (*job_)(index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t min_chunk, std::int64_t align,
                              FunctionRef<void(std::int64_t, std::int64_t)> fn) {
  if (n <= 0) return;
  min_chunk = std::max<std::int64_t>(1, min_chunk);
  align = std::max<std::int64_t>(1, align);
  const std::int64_t max_chunks = std::max<std::int64_t>(1, n / min_chunk);
  const std::int64_t chunks = std::min<std::int64_t>(size_, max_chunks);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  // Even split rounded up to `align`; the last chunks may be empty.
  const std::int64_t per = ((n + chunks - 1) / chunks + align - 1) / align * align;
  run([&](int worker) {
    const std::int64_t begin = std::min<std::int64_t>(n, worker * per);
    const std::int64_t end = std::min<std::int64_t>(n, begin + per);
    if (worker < chunks && begin < end) fn(begin, end);
  });
}

}  // namespace baton::cpu
