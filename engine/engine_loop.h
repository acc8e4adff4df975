// EngineLoop: an Engine on its own thread, for servers. Callers on any thread hand it work —
// any function of the Engine (add_request, abort, reserve, commit, release, ...) — and receive
// every step's outputs through a sink on the loop thread. The thread sleeps while there is nothing
// to do: it wakes for new work, or at the engine's next lease deadline; it never polls.
//
// The Engine stays single-threaded: only the loop thread touches it. The engine's clock must be
// the steady clock (the default), since the loop waits on it. Sinks must not block for long: they
// run between steps.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"

namespace baton {

class EngineLoop {
 public:
  using OutputSink = std::function<void(std::vector<RequestOutput>&&)>;
  using ErrorSink = std::function<void(const absl::Status&)>;  // a step failed as a whole

  // Starts the thread. `errors` defaults to logging.
  EngineLoop(std::unique_ptr<Engine> engine, OutputSink outputs, ErrorSink errors = nullptr);
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Runs fn(engine) on the loop thread before its next step.
  void post(std::function<void(Engine&)> fn);
  // post() with a result: the future is ready once fn has run.
  template <class F>
  auto call(F&& fn) -> std::future<std::invoke_result_t<F, Engine&>> {
    using R = std::invoke_result_t<F, Engine&>;
    auto task = std::make_shared<std::packaged_task<R(Engine&)>>(std::forward<F>(fn));
    std::future<R> result = task->get_future();
    post([task](Engine& e) { (*task)(e); });
    return result;
  }
  // Finishes the work already posted, stops the thread and joins it. Idempotent.
  void stop();

  // Loop iterations (wake-ups) so far: grows with work and deadlines, not with time.
  std::uint64_t iterations() const;

 private:
  void run();

  std::unique_ptr<Engine> engine_;
  OutputSink outputs_;
  ErrorSink errors_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void(Engine&)>> inbox_;
  bool stopping_ = false;
  std::uint64_t iterations_ = 0;
  std::thread thread_;
};

}  // namespace baton
