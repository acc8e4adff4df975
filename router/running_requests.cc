#include "router/running_requests.h"

#include <cstdio>
#include <random>
#include <vector>

#include "common/status.h"

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

RunningRequests::RunningRequests(std::size_t max_running) : max_running_(max_running) {
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  prefix_ = str_cat("req-", std::string(buf, 8), "-");
}

std::string RunningRequests::new_id() { return str_cat(prefix_, counter_.fetch_add(1) + 1); }

absl::StatusOr<std::shared_ptr<RequestControl>> RunningRequests::add(std::string& request_id) {
  if (request_id.size() > kMaxRequestIdLength) {
    return absl::InvalidArgumentError(
        str_cat("request_id has ", request_id.size(), " characters; at most ", kMaxRequestIdLength));
  }
  std::lock_guard lock(mu_);
  if (!refusal_.empty()) return absl::UnavailableError(refusal_);
  if (max_running_ > 0 && running_.size() >= max_running_) {
    return absl::ResourceExhaustedError(str_cat("the router is running ", running_.size(),
                                                " requests, its --max-running-requests; try again later"));
  }
  if (request_id.empty()) {
    do {
      request_id = new_id();
    } while (running_.contains(request_id));
  } else if (running_.contains(request_id)) {
    return absl::AlreadyExistsError(
        str_cat("request_id \"", request_id, "\" is already running; leave it empty to get a unique one"));
  }
  auto control = std::make_shared<RequestControl>();
  running_[request_id] = control;
  return control;
}

void RunningRequests::remove(const std::string& request_id) {
  std::lock_guard lock(mu_);
  running_.erase(request_id);
  if (running_.empty()) emptied_.notify_all();
}

void RunningRequests::refuse_new(const std::string& reason) {
  std::lock_guard lock(mu_);
  refusal_ = reason;
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

bool RunningRequests::cancel(const std::string& request_id, const std::string& reason) {
  std::shared_ptr<RequestControl> control;
  {
    std::lock_guard lock(mu_);
    auto it = running_.find(request_id);
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

}  // namespace baton::router
