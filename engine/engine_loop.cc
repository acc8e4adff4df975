#include "engine/engine_loop.h"

#include "spdlog/spdlog.h"

namespace baton {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, OutputSink outputs, ErrorSink errors)
    : engine_(std::move(engine)), outputs_(std::move(outputs)), errors_(std::move(errors)) {
  if (!errors_) errors_ = [](const absl::Status& s) { spdlog::error("engine step failed: {}", s.ToString()); };
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::post(std::function<void(Engine&)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(fn));
  }
  wake_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t EngineLoop::iterations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return iterations_;
}

void EngineLoop::run() {
  Engine& engine = *engine_;
  // A step that ran no forward and reported nothing (e.g. a waiting request that cannot get blocks
  // while reservations hold them) will not make progress until something changes: wait for work
  // or a deadline instead of stepping again.
  bool stalled = false;
  for (;;) {
    std::deque<std::function<void(Engine&)>> work;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto ready = [&] { return stopping_ || !inbox_.empty() || (engine.has_work() && !stalled); };
      // Only this thread touches the engine, so reading it under our lock is safe.
      if (const std::optional<EngineClock::time_point> deadline = engine.next_deadline()) {
        wake_.wait_until(lock, *deadline, ready);
      } else {
        wake_.wait(lock, ready);
      }
      ++iterations_;
      work.swap(inbox_);
      stopping = stopping_;
    }
    for (auto& fn : work) fn(engine);
    if (stopping) return;
    const std::int64_t steps_before = engine.stats().steps;
    absl::StatusOr<std::vector<RequestOutput>> outs = engine.step();
    if (!outs.ok()) {
      errors_(outs.status());
      stalled = true;
    } else {
      stalled = outs->empty() && engine.stats().steps == steps_before;
      if (!outs->empty()) outputs_(std::move(*outs));
    }
  }
}

}  // namespace baton
