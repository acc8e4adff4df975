// SerialQueue: runs the tasks posted to it one at a time, in the order posted, on the threads that
// post them: a post into an idle queue runs that task (and any posted meanwhile) before it
// returns; a post while another thread is running the queue only enqueues. One object's event
// handlers (gRPC reactions, HTTP write completions, timers) go through one queue, so they never
// run at once and need no lock of their own, and a handler that starts an operation whose
// completion is reported inline cannot re-enter itself.
//
// Thread-safety: post() from any thread. Must not: run tasks that block (they hold up whichever
// thread posted, often an I/O or gRPC thread), or be destroyed while a task may still be posted.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <utility>

namespace baton {

class SerialQueue {
 public:
  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(task));
      if (running_) return;
      running_ = true;
    }
    for (;;) {
      std::function<void()> next;
      {
        std::lock_guard lock(mu_);
        if (tasks_.empty()) {
          running_ = false;
          return;
        }
        next = std::move(tasks_.front());
        tasks_.pop_front();
      }
      next();
    }
  }

 private:
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
  bool running_ = false;
};

}  // namespace baton
