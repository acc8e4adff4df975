#include "router/running_requests.h"

#include <algorithm>
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

bool RequestControl::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
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

RunningRequests::RunningRequests(RunningLimits limits) : limits_(limits) {}

absl::StatusOr<RunningRequest> RunningRequests::add(const std::string& owner, std::string client_id,
                                                    const std::function<bool()>& gone) {
  BATON_RETURN_IF_ERROR(check_request_id(client_id));
  std::unique_lock lock(mu_);
  if (!refusal_.empty()) return absl::UnavailableError(refusal_);
  const auto duplicate = [&]() -> absl::Status {
    if (!client_id.empty() && running_.contains({owner, client_id})) {
      return absl::AlreadyExistsError(
          str_cat("request_id \"", client_id, "\" is already running; leave it empty to get a unique one"));
    }
    return absl::OkStatus();
  };
  BATON_RETURN_IF_ERROR(duplicate());
  if (has_room(owner)) {  // nobody waiting could take it: grant_waiters() runs whenever room appears
    ++per_owner_[owner];
  } else {
    if (queue_.size() >= limits_.max_queued) {
      ++counts_.queue_full;
      return full_refusal(owner);
    }
    // Wait for a slot: grant_waiters() hands it over (counted for us already) and wakes us.
    Waiter me{owner};
    queue_.push_back(&me);
    grant_waiters();
    const auto deadline = std::chrono::steady_clock::now() + limits_.queue_timeout;
    absl::Status left;
    while (!me.granted) {
      if (!refusal_.empty()) {
        left = absl::UnavailableError(refusal_);
      } else if (gone && gone()) {
        left = absl::CancelledError("the client went away while the request waited for room");
      } else if (std::chrono::steady_clock::now() >= deadline) {
        ++counts_.queue_timeout;
        left = absl::ResourceExhaustedError(str_cat("the request waited ", limits_.queue_timeout.count(),
                                                    " ms (--queue-timeout-ms) and found no room: ", running_.size(),
                                                    " requests are running; try again later"));
      }
      if (!left.ok()) {
        queue_.remove(&me);
        if (!absl::IsResourceExhausted(left)) ++counts_.left_queue;
        return left;
      }
      granted_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
    }
    --granted_;  // ours now; per_owner_ counted it at the grant
    ++counts_.admitted_after_wait;
    if (absl::Status d = duplicate(); !d.ok()) {
      give_back_slot(owner);
      return d;
    }
  }
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
  ++counts_.admitted;
  return r;
}

bool RunningRequests::has_room(const std::string& owner) const {
  if (limits_.max_running > 0 && running_.size() + granted_ >= limits_.max_running) return false;
  if (owner.empty() || limits_.max_per_owner == 0) return true;
  auto it = per_owner_.find(owner);
  return it == per_owner_.end() || it->second < limits_.max_per_owner;
}

absl::Status RunningRequests::full_refusal(const std::string& owner) const {
  const std::string queue =
      limits_.max_queued == 0 ? std::string() : str_cat(", and ", queue_.size(), " wait for room (--max-queued-requests)");
  if (limits_.max_running > 0 && running_.size() + granted_ >= limits_.max_running) {
    return absl::ResourceExhaustedError(
        str_cat("the router is running ", running_.size(), " requests, its --max-running-requests", queue, "; try again later"));
  }
  const auto it = per_owner_.find(owner);
  return absl::ResourceExhaustedError(str_cat("this API key runs ", it == per_owner_.end() ? 0 : it->second,
                                              " requests, its --max-running-requests-per-key", queue, "; try again later"));
}

void RunningRequests::grant_waiters() {
  bool any = false;
  for (;;) {
    if (limits_.max_running > 0 && running_.size() + granted_ >= limits_.max_running) break;
    Waiter* best = nullptr;
    std::size_t best_load = 0;
    for (Waiter* w : queue_) {
      if (!has_room(w->owner)) continue;
      const auto it = per_owner_.find(w->owner);
      const std::size_t load = it == per_owner_.end() ? 0 : it->second;
      if (best == nullptr || load < best_load) {  // strict: the earliest among equals
        best = w;
        best_load = load;
      }
    }
    if (best == nullptr) break;
    best->granted = true;
    ++granted_;
    ++per_owner_[best->owner];
    queue_.remove(best);
    any = true;
  }
  if (any) granted_cv_.notify_all();
}

void RunningRequests::give_back_slot(const std::string& owner) {
  auto it = per_owner_.find(owner);
  if (it != per_owner_.end() && --it->second == 0) per_owner_.erase(it);
  grant_waiters();
}

void RunningRequests::remove(const std::string& owner, const std::string& client_id) {
  std::lock_guard lock(mu_);
  if (running_.erase({owner, client_id}) > 0) give_back_slot(owner);
  if (running_.empty()) emptied_.notify_all();
}

void RunningRequests::refuse_new(const std::string& reason) {
  std::lock_guard lock(mu_);
  refusal_ = reason;
  granted_cv_.notify_all();  // waiters leave the queue
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
  std::lock_guard lock(mu_);
  limits_ = limits;
  grant_waiters();
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
