// The one CPU thread pool. The calling thread is worker 0; size() - 1 more threads wait for work.
//
// Built for many short parallel regions per second (a decode step has ~100): workers spin briefly
// on an atomic ticket before sleeping on a condition variable, so back-to-back ops do not pay a
// wake-up each. A region is a fixed set of tasks that the caller and the workers claim one at a
// time: the caller never waits for a worker that has not started (on a busy machine a descheduled
// worker would otherwise stall every op for a time slice), only for tasks a worker already runs.
// Work is split statically into tasks; results never depend on which thread ran a task. One
// region runs at a time (concurrent callers are serialized); regions must not nest.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace baton::cpu {

// A non-owning reference to a callable, so parallel regions never allocate.
template <class Sig>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(a...); }) {}
  R operator()(Args... a) const { return call_(obj_, a...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  // num_threads counts the caller; 0 means one per core the process may run on.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Calls fn(i) once for each i in [0, size()), concurrently where threads are free; returns when
  // all calls have returned. i is a task index, not a thread identity.
  void run(FunctionRef<void(int)> fn);

  // Splits [0, n) into at most size() contiguous chunks of at least min_chunk items (chunk bounds
  // are multiples of `align`) and calls fn(begin, end) for each. Runs inline when one chunk suffices.
  void parallel_for(std::int64_t n, std::int64_t min_chunk, std::int64_t align,
                    FunctionRef<void(std::int64_t, std::int64_t)> fn);

 private:
  // Runs fn(t) for t in [0, tasks) (tasks < 2^16) on the caller and any free workers.
  void run_tasks(std::int64_t tasks, FunctionRef<void(std::int64_t)> fn);
  // Claims and runs tasks of region `generation` until none is left (or the region is over).
  void work(std::uint32_t generation);
  void worker_loop();

  int size_ = 1;
  std::vector<std::thread> threads_;
  std::mutex submit_mu_;
  std::uint32_t generation_ = 0;  // under submit_mu_
  // The open region: generation << 32 | tasks << 16 | next unclaimed task. A worker claims a task
  // with a compare-and-swap that also checks the generation, so a late worker never touches a
  // finished region's function.
  std::atomic<std::uint64_t> ticket_{0};
  const FunctionRef<void(std::int64_t)>* task_fn_ = nullptr;
  std::atomic<std::int64_t> done_{0};  // tasks of the open region that have returned
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
};

}  // namespace baton::cpu
