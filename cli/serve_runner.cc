#include "cli/serve_runner.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

namespace baton::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Redraws "[#####.....] done/total" on stderr, at most every 100 ms unless it is the last.
class ProgressBar {
 public:
  ProgressBar(std::size_t total, bool enabled) : total_(total), enabled_(enabled), tty_(isatty(2) != 0) {}
  void advance() {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    if (!enabled_) return;
    const auto now = Clock::now();
    if (done_ != total_ && now - last_ < std::chrono::milliseconds(tty_ ? 100 : 2000)) return;
    last_ = now;
    constexpr int kWidth = 40;
    const int filled = static_cast<int>(kWidth * done_ / std::max<std::size_t>(total_, 1));
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "%s[%s] %zu/%zu%s", tty_ ? "\r" : "", bar.c_str(), done_, total_,
                 tty_ && done_ != total_ ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::mutex mu_;
  const std::size_t total_;
  const bool enabled_, tty_;
  std::size_t done_ = 0;
  Clock::time_point last_{};
};

// A counting semaphore whose waits never outlive a slot's release.
class Slots {
 public:
  explicit Slots(int n) : free_(n) {}
  void acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return free_ > 0; });
    --free_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

}  // namespace

std::vector<double> poisson_arrivals(std::size_t n, double rate, std::uint64_t seed) {
  std::vector<double> at(n, 0.0);
  if (std::isinf(rate) || rate <= 0) return at;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) t += gap(rng);
    at[i] = t;
  }
  return at;
}

LoadRun run_load(ServeBackend& backend, const std::vector<ServePrompt>& prompts, const ServeSampling& sampling,
                 const LoadOptions& options) {
  LoadRun run;
  run.results.resize(prompts.size());
  const std::vector<double> arrivals = poisson_arrivals(prompts.size(), options.request_rate, options.seed);
  ProgressBar progress(prompts.size(), options.progress);
  Slots slots(options.max_concurrency > 0 ? options.max_concurrency : static_cast<int>(prompts.size()) + 1);
  std::vector<std::thread> threads;
  threads.reserve(prompts.size());
  const auto start = Clock::now();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    // Waiting for an arrival time is the schedule itself, not synchronisation.
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
    slots.acquire();
    threads.emplace_back([&, i] {
      ServeSampling s = sampling;
      if (s.seed != 0) s.seed += i;
      run.results[i] = backend.send(prompts[i], s);
      slots.release();
      progress.advance();
    });
  }
  for (std::thread& t : threads) t.join();
  run.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

}  // namespace baton::cli
