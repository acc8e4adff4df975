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
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this] { worker_loop(); });
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
  run_tasks(size_, [&](std::int64_t t) { fn(static_cast<int>(t)); });
}

void ThreadPool::work(std::uint32_t generation) {
  std::uint64_t w = ticket_.load(std::memory_order_acquire);
  while (true) {
    const std::uint64_t tasks = (w >> 16) & 0xffff, next = w & 0xffff;
    if (static_cast<std::uint32_t>(w >> 32) != generation || next >= tasks) return;
    if (!ticket_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // The region cannot end before this task is counted done, so task_fn_ is still its function.
    (*task_fn_)(static_cast<std::int64_t>(next));
    done_.fetch_add(1, std::memory_order_release);
    w = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run_tasks(std::int64_t tasks, FunctionRef<void(std::int64_t)> fn) {
  if (size_ == 1 || tasks <= 1) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  std::lock_guard<std::mutex> submit(submit_mu_);
  const std::uint32_t generation = ++generation_;
  task_fn_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  // seq_cst: publishes task_fn_ and done_, and orders against the sleepers_ load.
  ticket_.store(static_cast<std::uint64_t>(generation) << 32 | static_cast<std::uint64_t>(tasks) << 16);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    sleep_cv_.notify_all();
  }
  work(generation);
  // Only tasks a worker has claimed (and so is running) remain.
  for (int spins = 0; done_.load(std::memory_order_acquire) != tasks; ++spins) {
    if (spins < 2000) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // the worker running a task was descheduled; let it run
    }
  }
}

void ThreadPool::worker_loop() {
  std::uint32_t seen = 0;
  auto generation = [this] { return static_cast<std::uint32_t>(ticket_.load(std::memory_order_acquire) >> 32); };
  while (true) {
    auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    for (int spins = 0;; ++spins) {
      if (generation() != seen || stop_.load(std::memory_order_relaxed)) break;
      if ((spins & 255) == 255) {
        // Give the core away now and then: when threads outnumber free cores, the thread we are
        // waiting for may be queued behind us.
        std::this_thread::yield();
      }
      if ((spins & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleepers_.fetch_add(1);
        sleep_cv_.wait(lock, [&] { return generation() != seen || stop_.load(); });
        sleepers_.fetch_sub(1);
        deadline = std::chrono::steady_clock::now() + kSpinTime;
      }
      cpu_relax();
    }
    if (stop_.load()) return;
    seen = generation();
    work(seen);
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
  run_tasks(chunks, [&](std::int64_t chunk) {
    const std::int64_t begin = std::min<std::int64_t>(n, chunk * per);
    const std::int64_t end = std::min<std::int64_t>(n, begin + per);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace baton::cpu
