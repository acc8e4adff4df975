#include "router/call_watchdog.h"

#include <limits>

#include "common/status.h"

namespace baton::router {

CallWatchdog::CallWatchdog(CallWatchdogOptions options) : options_(options), thread_([this] { run(); }) {}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::size_t CallWatchdog::watching() const {
  std::lock_guard lock(mu_);
  return watches_.size();
}

void CallWatchdog::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.tick, [&] { return stopping_; });
    if (stopping_) break;
    const Clock::time_point now = Clock::now();
    for (Watch* w : watches_) w->check(now, options_.unreachable_polls);
  }
}

namespace {
Clock::rep due_after(std::chrono::milliseconds allowance) {
  if (allowance.count() <= 0) return std::numeric_limits<Clock::rep>::max();
  return (Clock::now() + allowance).time_since_epoch().count();
}
}  // namespace

CallWatchdog::Watch::Watch(CallWatchdog& dog, const Node& node, grpc::ClientContext& context,
                           std::chrono::milliseconds first_allowance, std::chrono::milliseconds allowance)
    : dog_(dog),
      node_(node),
      context_(context),
      allowance_(allowance),
      window_ms_(first_allowance.count()),
      unreachable_at_start_(node.unreachable_polls()),
      due_(due_after(first_allowance)) {
  std::lock_guard lock(dog_.mu_);
  dog_.watches_.insert(this);
}

CallWatchdog::Watch::~Watch() {
  std::lock_guard lock(dog_.mu_);
  dog_.watches_.erase(this);
}

void CallWatchdog::Watch::progress() {
  window_ms_.store(allowance_.count(), std::memory_order_relaxed);
  due_.store(due_after(allowance_), std::memory_order_relaxed);
}

std::string CallWatchdog::Watch::why() const {
  std::lock_guard lock(why_mu_);
  return why_;
}

void CallWatchdog::Watch::check(Clock::time_point now, int unreachable_polls) {
  if (fired_.load(std::memory_order_relaxed)) return;
  std::string why;
  Reason reason = Reason::kNoProgress;
  const std::uint64_t unreachable = node_.unreachable_polls();
  if (now.time_since_epoch().count() > due_.load(std::memory_order_relaxed)) {
    why = str_cat(node_.label(), " sent nothing for ", window_ms_.load(std::memory_order_relaxed),
                  " ms; the call was ended");
  } else if (unreachable_polls > 0 && unreachable >= static_cast<std::uint64_t>(unreachable_polls) &&
             unreachable > unreachable_at_start_) {
    why = str_cat(node_.label(), " stopped answering its health checks (", unreachable,
                  " in a row); the call was ended");
    reason = Reason::kNodeUnreachable;
  } else {
    return;
  }
  {
    std::lock_guard lock(why_mu_);
    why_ = std::move(why);
  }
  reason_ = reason;
  fired_.store(true, std::memory_order_release);
  context_.TryCancel();
}

}  // namespace baton::router
