#include "router/running_requests.h"

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

absl::StatusOr<RunningRequest> RunningRequests::add(const std::string& owner, std::string client_id) {
  BATON_RETURN_IF_ERROR(check_request_id(client_id));
  std::lock_guard lock(mu_);
  if (!refusal_.empty()) return absl::UnavailableError(refusal_);
  if (limits_.max_running > 0 && running_.size() >= limits_.max_running) {
    return absl::ResourceExhaustedError(str_cat("the router is running ", running_.size(),
                                                " requests, its --max-running-requests; try again later"));
  }
  if (!owner.empty() && limits_.max_per_owner > 0 && per_owner_[owner] >= limits_.max_per_owner) {
    return absl::ResourceExhaustedError(str_cat("this API key runs ", per_owner_[owner],
                                                " requests, its --max-running-requests-per-key; try again later"));
  }
  RunningRequest r;
  if (client_id.empty()) {
    // 128 random bits: another caller cannot guess it (and collisions do not happen).
    r.client_id = r.node_id = str_cat("req-", security::random_hex(16));
  } else {
    if (running_.contains({owner, client_id})) {
      return absl::AlreadyExistsError(
          str_cat("request_id \"", client_id, "\" is already running; leave it empty to get a unique one"));
    }
    r.node_id = str_cat(client_id, "~", security::random_hex(8));
    r.client_id = std::move(client_id);
  }
  r.control = std::make_shared<RequestControl>();
  running_[{owner, r.client_id}] = r.control;
  ++per_owner_[owner];
  return r;
}

void RunningRequests::remove(const std::string& owner, const std::string& client_id) {
  std::lock_guard lock(mu_);
  if (running_.erase({owner, client_id}) > 0) {
    auto it = per_owner_.find(owner);
    if (it != per_owner_.end() && --it->second == 0) per_owner_.erase(it);
  }
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

}  // namespace baton::router
