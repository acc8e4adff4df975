#include "router/running_requests.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "common/status.h"
#include "security/random.h"

namespace baton::router {

constexpr std::size_t kMaxRequestIdLength = 256;

void RequestControl::cancel(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (!cancelled_) {
    cancelled_ = true;
    reason_ = reason;
  }
  for (grpc::ClientContext* c : calls_) c->TryCancel();
}

void RequestControl::client_left(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (!cancelled_) client_left_ = true;
  }
  cancel(reason);
}

bool RequestControl::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

bool RequestControl::left() const {
  std::lock_guard lock(mu_);
  return client_left_;
}

std::string RequestControl::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

RequestControl::CallScope::CallScope(RequestControl& control, grpc::ClientContext& context)
    : control_(control), context_(context) {
  std::lock_guard lock(control_.mu_);
  control_.calls_.insert(&context_);
  if (control_.cancelled_) context_.TryCancel();
}

RequestControl::CallScope::~CallScope() {
  std::lock_guard lock(control_.mu_);
  control_.calls_.erase(&context_);
}

absl::Status check_request_id(const std::string& request_id) {
  if (request_id.size() > kMaxRequestIdLength) {
    return absl::InvalidArgumentError(
        str_cat("request_id: ", request_id.size(), " characters; at most ", kMaxRequestIdLength));
  }
  for (std::size_t i = 0; i < request_id.size(); ++i) {
    const auto c = static_cast<unsigned char>(request_id[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          str_cat("request_id: only printable ASCII characters are allowed; character ", i, " is byte ",
                  static_cast<int>(c)));
    }
  }
  return absl::OkStatus();
}

RunningRequests::RunningRequests(RunningLimits limits) : limits_(limits) {
  deadline_thread_ = std::thread([this] { expire_waits(); });
}

RunningRequests::~RunningRequests() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  deadlines_.notify_all();
  deadline_thread_.join();
  Deliveries out;
  {
    std::lock_guard lock(mu_);
    for (Waiter& w : queue_) out.emplace_back(std::move(w.done), absl::UnavailableError("the router is stopping"));
    queue_.clear();
  }
  deliver(out);
}

void RunningRequests::deliver(Deliveries& out) {
  for (auto& [done, result] : out) done(std::move(result));
  out.clear();
}

absl::StatusOr<RunningRequest> RunningRequests::add(const std::string& owner, std::string client_id,
                                                    const std::function<bool()>& gone) {
  struct Answer {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<absl::StatusOr<RunningRequest>> result;
  };
  auto answer = std::make_shared<Answer>();
  const std::uint64_t ticket = add_async(owner, std::move(client_id), [answer](absl::StatusOr<RunningRequest> r) {
    std::lock_guard lock(answer->mu);
    answer->result = std::move(r);
    answer->cv.notify_all();
  });
  std::unique_lock lock(answer->mu);
  // The queue's own deadline ends the wait; `gone` is asked every 50 ms meanwhile.
  while (!answer->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return answer->result.has_value(); })) {
    if (gone && gone()) {
      lock.unlock();
      leave_queue(ticket);  // the answer comes now: CANCELLED, or the admission that won the race
      lock.lock();
    }
  }
  return std::move(*answer->result);
}

absl::Status RunningRequests::duplicate(const std::string& owner, const std::string& client_id) const {
  if (!client_id.empty() && running_.contains({owner, client_id})) {
    return absl::AlreadyExistsError(
        str_cat("request_id \"", client_id, "\" is already running; leave it empty to get a unique one"));
  }
  return absl::OkStatus();
}

RunningRequest RunningRequests::register_locked(const std::string& owner, std::string client_id) {
  RunningRequest r;
  if (client_id.empty()) {
    // 128 random bits: another caller cannot guess it (and collisions do not happen).
    r.client_id = r.node_id = str_cat("req-", security::random_hex(16));
  } else {
    r.node_id = str_cat(client_id, "~", security::random_hex(8));
    r.client_id = std::move(client_id);
  }
  r.control = std::make_shared<RequestControl>();
  running_[{owner, r.client_id}] = r.control;
  ++per_owner_[owner];
  ++counts_.admitted;
  return r;
}

std::uint64_t RunningRequests::add_async(const std::string& owner, std::string client_id, AdmissionCallback done) {
  if (absl::Status s = check_request_id(client_id); !s.ok()) {
    done(s);
    return 0;
  }
  Deliveries out;
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    absl::Status refused;
    if (!refusal_.empty()) {
      refused = absl::UnavailableError(refusal_);
    } else if (absl::Status d = duplicate(owner, client_id); !d.ok()) {
      refused = d;
    } else if (has_room(owner)) {  // nobody waiting could take it: grant_waiters() runs whenever room appears
      out.emplace_back(std::move(done), register_locked(owner, std::move(client_id)));
    } else if (queue_.size() >= limits_.max_queued) {
      ++counts_.queue_full;
      refused = full_refusal(owner);
    } else {
      ticket = next_ticket_++;
      queue_.push_back(Waiter{ticket, owner, std::move(client_id),
                              std::chrono::steady_clock::now() + limits_.queue_timeout, std::move(done)});
      grant_waiters(out);  // it may go at once when another key holds the room it lacks
      deadlines_.notify_all();
    }
    if (!refused.ok()) out.emplace_back(std::move(done), refused);
  }
  deliver(out);
  return ticket;
}

void RunningRequests::leave_queue(std::uint64_t ticket) {
  Deliveries out;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Waiter& w) { return w.ticket == ticket; });
    if (it == queue_.end()) return;  // admitted or refused already
    ++counts_.left_queue;
    out.emplace_back(std::move(it->done),
                     absl::CancelledError("the client went away while the request waited for room"));
    queue_.erase(it);
  }
  deliver(out);
}

void RunningRequests::expire_waits() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    auto next = std::chrono::steady_clock::time_point::max();
    for (const Waiter& w : queue_) next = std::min(next, w.deadline);
    if (next == std::chrono::steady_clock::time_point::max()) {
      deadlines_.wait(lock);
      continue;
    }
    if (std::chrono::steady_clock::now() < next) {
      deadlines_.wait_until(lock, next);
      continue;
    }
    Deliveries out;
    const auto now = std::chrono::steady_clock::now();
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      ++counts_.queue_timeout;
      out.emplace_back(std::move(it->done),
                       absl::ResourceExhaustedError(str_cat("the request waited ", limits_.queue_timeout.count(),
                                                            " ms (--queue-timeout-ms) and found no room: ",
                                                            running_.size(), " requests are running; try again later")));
      it = queue_.erase(it);
    }
    lock.unlock();
    deliver(out);
    lock.lock();
  }
}

bool RunningRequests::has_room(const std::string& owner) const {
  if (limits_.max_running > 0 && running_.size() >= limits_.max_running) return false;
  if (owner.empty() || limits_.max_per_owner == 0) return true;
  auto it = per_owner_.find(owner);
  return it == per_owner_.end() || it->second < limits_.max_per_owner;
}

absl::Status RunningRequests::full_refusal(const std::string& owner) const {
  const std::string queue =
      limits_.max_queued == 0 ? std::string() : str_cat(", and ", queue_.size(), " wait for room (--max-queued-requests)");
  if (limits_.max_running > 0 && running_.size() >= limits_.max_running) {
    return absl::ResourceExhaustedError(
        str_cat("the router is running ", running_.size(), " requests, its --max-running-requests", queue, "; try again later"));
  }
  const auto it = per_owner_.find(owner);
  return absl::ResourceExhaustedError(str_cat("this API key runs ", it == per_owner_.end() ? 0 : it->second,
                                              " requests, its --max-running-requests-per-key", queue, "; try again later"));
}

void RunningRequests::grant_waiters(Deliveries& out) {
  for (;;) {
    if (limits_.max_running > 0 && running_.size() >= limits_.max_running) return;
    auto best = queue_.end();
    std::size_t best_load = 0;
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (!has_room(it->owner)) continue;
      const auto p = per_owner_.find(it->owner);
      const std::size_t load = p == per_owner_.end() ? 0 : p->second;
      if (best == queue_.end() || load < best_load) {  // strict: the earliest among equals
        best = it;
        best_load = load;
      }
    }
    if (best == queue_.end()) return;
    if (absl::Status d = duplicate(best->owner, best->client_id); !d.ok()) {
      out.emplace_back(std::move(best->done), d);  // its twin started meanwhile
    } else {
      ++counts_.admitted_after_wait;
      out.emplace_back(std::move(best->done), register_locked(best->owner, std::move(best->client_id)));
    }
    queue_.erase(best);
  }
}

void RunningRequests::remove(const std::string& owner, const std::string& client_id) {
  Deliveries out;
  {
    std::lock_guard lock(mu_);
    if (running_.erase({owner, client_id}) > 0) {
      auto it = per_owner_.find(owner);
      if (it != per_owner_.end() && --it->second == 0) per_owner_.erase(it);
      grant_waiters(out);
    }
    if (running_.empty()) emptied_.notify_all();
  }
  deliver(out);
}

void RunningRequests::refuse_new(const std::string& reason) {
  Deliveries out;
  {
    std::lock_guard lock(mu_);
    refusal_ = reason;
    for (Waiter& w : queue_) {  // waiters leave the queue
      ++counts_.left_queue;
      out.emplace_back(std::move(w.done), absl::UnavailableError(reason));
    }
    queue_.clear();
  }
  deliver(out);
}

bool RunningRequests::wait_until_empty(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  return emptied_.wait_until(lock, deadline, [this] { return running_.empty(); });
}

std::size_t RunningRequests::cancel_all(const std::string& reason) {
  std::vector<std::shared_ptr<RequestControl>> controls;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, c] : running_) controls.push_back(c);
  }
  for (const auto& c : controls) c->cancel(reason);
  return controls.size();
}

bool RunningRequests::cancel(const std::string& owner, const std::string& client_id, const std::string& reason) {
  std::shared_ptr<RequestControl> control;
  {
    std::lock_guard lock(mu_);
    auto it = running_.find({owner, client_id});
    if (it == running_.end()) return false;
    control = it->second;
  }
  control->cancel(reason);
  return true;
}

std::size_t RunningRequests::size() const {
  std::lock_guard lock(mu_);
  return running_.size();
}

std::size_t RunningRequests::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void RunningRequests::set_limits(const RunningLimits& limits) {
  Deliveries out;
  {
    std::lock_guard lock(mu_);
    limits_ = limits;
    grant_waiters(out);
  }
  deliver(out);
}

RunningLimits RunningRequests::limits() const {
  std::lock_guard lock(mu_);
  return limits_;
}

AdmissionCounts RunningRequests::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace baton::router
