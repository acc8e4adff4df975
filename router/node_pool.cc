#include "router/node_pool.h"

#include <algorithm>

#include "common/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "spdlog/spdlog.h"
#include "security/grpc_credentials.h"

namespace baton::router {

using baton::node::v1::InfoRequest;
using baton::node::v1::NodeInfo;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

std::string describe(const grpc::Status& s) { return str_cat(grpc_code_name(s.error_code()), ": ", s.error_message()); }

// gRPC deadlines take system_clock time points.
std::chrono::system_clock::time_point deadline_in(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

// What a problem is, without the details that vary from one failed poll to the next (gRPC's
// connection messages): "health check failed: UNAVAILABLE". Logging compares these, so a node that
// stays down is logged once.
std::string problem_kind(const std::string& problem) {
  const auto failed = problem.find("failed: ");
  if (failed == std::string::npos) return problem;
  const auto code_end = problem.find(':', failed + 8);
  return code_end == std::string::npos ? problem : problem.substr(0, code_end);
}

}  // namespace

const char* node_source_name(NodeSource source) {
  switch (source) {
    case NodeSource::kFlag: return "flag";
    case NodeSource::kRegistration: return "registration";
    case NodeSource::kDns: return "dns";
  }
  return "?";
}

// ---- Node -------------------------------------------------------------------------------------

Node::Node(NodeKind kind, std::string address) : kind_(kind), address_(std::move(address)) {
  grpc::ChannelArguments args;
  // A node that restarts must be found again within about a poll interval, not after gRPC's
  // default reconnect backoff (up to two minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  channel_ = grpc::CreateCustomChannel(address_, security::cluster_channel_credentials(), args);
  if (kind_ == NodeKind::kPrefill) prefill_ = baton::node::v1::PrefillNode::NewStub(channel_);
  else decode_ = baton::node::v1::DecodeNode::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

baton::node::v1::PrefillNode::Stub& Node::prefill() const {
  BATON_CHECK(prefill_ != nullptr, address_, " is not a prefill node");
  return *prefill_;
}

baton::node::v1::DecodeNode::Stub& Node::decode() const {
  BATON_CHECK(decode_ != nullptr, address_, " is not a decode node");
  return *decode_;
}

// ---- NodeClaim --------------------------------------------------------------------------------

NodeClaim& NodeClaim::operator=(NodeClaim&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::exchange(other.pool_, nullptr);
    node_ = std::move(other.node_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void NodeClaim::reset() {
  if (pool_ != nullptr && node_) pool_->release_claim(*node_, id_);
  pool_ = nullptr;
  node_.reset();
}

// ---- NodePool ---------------------------------------------------------------------------------

struct NodePool::Round {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t left = 0;  // callbacks still to run or still running
  void add() {
    std::lock_guard lock(mu);
    ++left;
  }
  void done() {
    std::lock_guard lock(mu);
    if (--left == 0) cv.notify_all();
  }
};

// One node's Check + Info. poll_once owns it and the Round, and frees both on its own thread once
// every callback has called Round::done(): a callback never holds the last reference to a node, so
// a node forgotten meanwhile never has its channel (and perhaps gRPC itself) torn down on a gRPC
// thread, racing the process's exit.
struct NodePool::PollCall {
  std::shared_ptr<Node> node;
  Round* round = nullptr;
  Clock::time_point started;
  grpc::ClientContext health_context;
  HealthCheckRequest health_request;
  HealthCheckResponse health_response;
  grpc::ClientContext info_context;
  InfoRequest info_request;
  NodeInfo info;
};

NodePool::NodePool(NodePoolOptions options) : options_(std::move(options)) {
  for (const auto& a : options_.prefill_addresses) (void)add(NodeKind::kPrefill, a);
  for (const auto& a : options_.decode_addresses) (void)add(NodeKind::kDecode, a);
}

NodePool::~NodePool() { stop(); }

void NodePool::start() {
  poll_once();
  std::lock_guard lock(mu_);
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { run(); });
}

void NodePool::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void NodePool::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.poll_interval, [this] { return stopping_ || wake_; });
    wake_ = false;
    if (stopping_) break;
    lock.unlock();
    poll_once();
    (void)forget_unreachable();
    lock.lock();
  }
}

void NodePool::poll_soon() {
  {
    std::lock_guard lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

absl::Status NodePool::add(NodeKind kind, const std::string& address, NodeSource source, std::size_t max_from_source) {
  if (address.empty()) return absl::InvalidArgumentError("node address is empty (expected HOST:PORT)");
  std::lock_guard lock(mu_);
  if (auto n = find_locked(kind, address)) {
    n->sources_.insert(source);
    return absl::OkStatus();
  }
  const auto from_source = std::count_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n->sources_.contains(source); });
  if (static_cast<std::size_t>(from_source) >= max_from_source) {
    return absl::ResourceExhaustedError(str_cat("the router knows ", from_source, " nodes from ", node_source_name(source),
                                                " already, its limit; ", node_label(kind, address), " is not added"));
  }
  nodes_.push_back(std::make_shared<Node>(kind, address));
  nodes_.back()->sources_.insert(source);
  spdlog::info("router: added {} (from {})", nodes_.back()->label(), node_source_name(source));
  return absl::OkStatus();
}

bool NodePool::remove(NodeKind kind, const std::string& address, NodeSource source) {
  std::lock_guard lock(mu_);
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
    Node& n = **it;
    if (n.kind() != kind || n.address() != address) continue;
    n.sources_.erase(source);
    if (!n.sources_.empty()) return false;
    spdlog::info("router: removed {} ({} no longer lists it); requests running there finish", n.label(),
                 node_source_name(source));
    nodes_.erase(it);
    return true;
  }
  return false;
}

std::vector<std::string> NodePool::forget_unreachable(Clock::time_point now) {
  std::vector<std::string> forgotten;
  if (options_.forget_unreachable_after.count() <= 0) return forgotten;
  std::lock_guard lock(mu_);
  std::erase_if(nodes_, [&](const std::shared_ptr<Node>& n) {
    if (n->sources_.contains(NodeSource::kFlag) || !n->unreachable_since_) return false;
    if (now - *n->unreachable_since_ < options_.forget_unreachable_after) return false;
    spdlog::warn("router: forgot {}: unreachable for {} ms (--forget-unreachable-ms {}; last problem: {})", n->label(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - *n->unreachable_since_).count(),
                 options_.forget_unreachable_after.count(), n->problem_);
    forgotten.push_back(n->label());
    return true;
  });
  return forgotten;
}

std::shared_ptr<Node> NodePool::find_locked(NodeKind kind, const std::string& address) const {
  for (const auto& n : nodes_) {
    if (n->kind() == kind && n->address() == address) return n;
  }
  return nullptr;
}

void NodePool::poll_once() {
  std::vector<std::shared_ptr<Node>> nodes;
  {
    std::lock_guard lock(mu_);
    nodes = nodes_;
  }
  if (!nodes.empty()) {
    Round round;
    round.left = nodes.size();
    std::vector<std::unique_ptr<PollCall>> calls;
    calls.reserve(nodes.size());
    for (auto& n : nodes) {
      calls.push_back(std::make_unique<PollCall>());
      calls.back()->node = std::move(n);
      calls.back()->round = &round;
      poll_async(*calls.back());
    }
    // Every call has a deadline (node_timeout), so every callback runs and this wait ends.
    std::unique_lock lock(round.mu);
    round.cv.wait(lock, [&] { return round.left == 0; });
  }
  log_pair_changes();
}

// Check, then Info, each with the node timeout as its deadline; callbacks never block.
void NodePool::poll_async(PollCall& poll) {
  PollCall* call = &poll;
  call->started = Clock::now();
  call->health_context.set_deadline(deadline_in(options_.health_timeout));
  call->node->health().async()->Check(
      &call->health_context, &call->health_request, &call->health_response, [this, call](grpc::Status s) {
        Node& n = *call->node;
        if (!s.ok() || call->health_response.status() != HealthCheckResponse::SERVING) {
          record_poll(n, call->started,
                      s.ok() ? str_cat("health check says ",
                                       HealthCheckResponse::ServingStatus_Name(call->health_response.status()))
                             : str_cat("health check failed: ", describe(s)),
                      nullptr, /*reachable=*/s.ok());
          call->round->done();
          return;
        }
        call->info_context.set_deadline(deadline_in(options_.node_timeout));
        auto on_info = [this, call](grpc::Status info_status) {
          if (info_status.ok()) {
            record_poll(*call->node, call->started, "", &call->info, true);
          } else {
            record_poll(*call->node, call->started, str_cat("Info failed: ", describe(info_status)), nullptr, true);
          }
          call->round->done();
        };
        // Info's callback may finish before this one returns: counted apart, so the node (whose
        // gRPC client this call goes through) outlives both.
        call->round->add();
        if (n.kind() == NodeKind::kPrefill) {
          n.prefill().async()->Info(&call->info_context, &call->info_request, &call->info, on_info);
        } else {
          n.decode().async()->Info(&call->info_context, &call->info_request, &call->info, on_info);
        }
        call->round->done();
      });
}

void NodePool::record_poll(Node& node, Clock::time_point started, const std::string& poll_problem,
                           const NodeInfo* info, bool reachable) {
  std::string problem = poll_problem;
  if (problem.empty() && info != nullptr) {
    if (absl::Status s = check_node(node.kind(), node.address(), *info); !s.ok()) problem = std::string(s.message());
  }
  if (info != nullptr && options_.on_info) options_.on_info(node, *info);
  {
    std::lock_guard lock(mu_);
    apply_poll_locked(node, started, problem, info, reachable);
  }
  if (options_.on_polled) options_.on_polled();
}

void NodePool::apply_poll_locked(Node& node, Clock::time_point started, const std::string& problem,
                                 const NodeInfo* info, bool reachable) {
  if (reachable) node.unreachable_since_.reset();
  else if (!node.unreachable_since_) node.unreachable_since_ = started;
  node.unreachable_polls_.store(reachable ? 0 : node.unreachable_polls_.load(std::memory_order_relaxed) + 1,
                                std::memory_order_relaxed);
  if (info != nullptr) {
    if (node.info_ && node.info_->instance_id() != info->instance_id()) {
      spdlog::info("router: {} restarted (instance_id {} -> {})", node.label(), node.info_->instance_id(),
                   info->instance_id());
    }
    node.info_ = *info;
    node.info_asked_at_ = started;
  }
  // A poll that began before a request-path failure does not overrule it.
  if (problem.empty() && started < node.failed_at_) return;
  const bool usable = problem.empty();
  if (usable != node.usable_ || (!usable && problem_kind(problem) != problem_kind(node.problem_))) {
    if (usable) {
      spdlog::info("router: {} is usable ({}, role {}, speculation {})", node.label(), node.info_->model_name(),
                   node.info_->role(),
                   node.info_->speculative_method().empty()
                       ? std::string("none")
                       : str_cat(node.info_->speculative_method(), " k=", node.info_->num_speculative_tokens()));
    } else {
      spdlog::warn("router: {} is not usable: {}", node.label(), problem);
    }
  }
  node.usable_ = usable;
  node.problem_ = problem;
}

void NodePool::log_pair_changes() {
  std::lock_guard lock(mu_);
  std::map<std::string, std::string> now;
  for (const auto& p : nodes_) {
    if (p->kind() != NodeKind::kPrefill || !p->usable_) continue;
    for (const auto& d : nodes_) {
      if (d->kind() != NodeKind::kDecode || !d->usable_) continue;
      const std::string key = str_cat(p->address(), "|", d->address());
      absl::Status s = check_pair(p->address(), *p->info_, d->address(), *d->info_);
      now[key] = s.ok() ? "" : std::string(s.message());
      auto before = pair_refusals_.find(key);
      const bool changed = before == pair_refusals_.end() ? !s.ok() : before->second != now[key];
      if (!changed) continue;
      if (s.ok()) {
        spdlog::info("router: {} and {} may now be paired", p->label(), d->label());
      } else {
        spdlog::error("router: {}", std::string(s.message()));
      }
    }
  }
  pair_refusals_ = std::move(now);
}

void NodePool::report_failure(const Node& node, const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return;
  }
  std::lock_guard lock(mu_);
  auto n = find_locked(node.kind(), node.address());
  if (!n) return;
  n->failed_at_ = Clock::now();
  const std::string problem = str_cat("a request-path call failed: ", describe(status));
  if (n->usable_) spdlog::warn("router: {} is not usable: {}", n->label(), problem);
  n->usable_ = false;
  n->problem_ = problem;
}

NodeView NodePool::view_locked(const Node& node) const {
  NodeView v;
  v.address = node.address();
  v.info = &*node.info_;
  for (const auto& [id, c] : node.claims_) {
    if (c.at < node.info_asked_at_) continue;  // the node's Info already counts it
    v.reserved_blocks += c.blocks;
    v.queued_tokens += c.tokens;
    ++v.requests;
  }
  return v;
}

NodeClaim NodePool::claim_locked(const std::shared_ptr<Node>& node, std::int64_t blocks, std::int64_t tokens) {
  NodeClaim claim;
  claim.pool_ = this;
  claim.node_ = node;
  claim.id_ = next_claim_++;
  node->claims_[claim.id_] = Node::Claim{blocks, tokens, Clock::now()};
  return claim;
}

void NodePool::release_claim(Node& node, std::uint64_t id) {
  std::lock_guard lock(mu_);
  node.claims_.erase(id);
}

absl::StatusOr<ChosenNodes> NodePool::choose(const PlacementRequest& request, const std::set<std::string>& excluded) {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Node>> ds, ps;
  std::vector<NodeView> dv, pv;
  std::string unusable;
  int configured_decodes = 0;
  for (const auto& n : nodes_) {
    if (n->kind() == NodeKind::kDecode) {
      ++configured_decodes;
      if (!n->usable_) unusable += str_cat(unusable.empty() ? "" : "; ", n->address(), ": ", n->problem_);
      else if (excluded.contains(n->address())) {
        unusable += str_cat(unusable.empty() ? "" : "; ", n->address(), ": failed this request already");
      }
    }
    if (!n->usable_ || excluded.contains(n->address())) continue;
    (n->kind() == NodeKind::kDecode ? ds : ps).push_back(n);
    (n->kind() == NodeKind::kDecode ? dv : pv).push_back(view_locked(*n));
  }
  absl::StatusOr<Placement> placed = place(dv, pv, request);
  if (!placed.ok()) {
    if (placed.status().code() == absl::StatusCode::kUnavailable && ds.empty()) {
      return absl::UnavailableError(
          configured_decodes == 0
              ? "no decode node: start the router with --decode HOST:PORT or let decode nodes register"
              : str_cat("no usable decode node (", configured_decodes, " known: ", unusable, ")"));
    }
    return placed.status();
  }
  ChosenNodes out;
  out.site = placed->site;
  out.decode = ds[placed->decode];
  out.decode_info = *out.decode->info_;
  out.decode_claim = claim_locked(out.decode, blocks_for_prompt(out.decode_info, request.prompt_len), 0);
  if (placed->prefill >= 0) {
    out.prefill = ps[placed->prefill];
    out.prefill_info = *out.prefill->info_;
    out.prefill_claim = claim_locked(out.prefill, 0, request.prompt_len);
  }
  return out;
}

std::vector<std::string> NodePool::addresses() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back(n->address());
  return out;
}

std::vector<DecodeCapacity> NodePool::decode_capacities() const {
  std::lock_guard lock(mu_);
  std::vector<DecodeCapacity> out;
  for (const auto& n : nodes_) {
    if (n->kind() != NodeKind::kDecode || !n->usable_ || !n->info_) continue;
    const auto& load = n->info_->load();
    out.push_back({n->info_->max_num_seqs(), load.pools_size() > 0 ? load.pools(0).num_blocks() : 0});
  }
  return out;
}

std::vector<NodeStatus> NodePool::status() const {
  std::lock_guard lock(mu_);
  std::vector<NodeStatus> out;
  for (const auto& n : nodes_) {
    out.push_back({n->kind(), n->address(), n->usable_, n->usable_ ? "" : n->problem_, n->sources_, n->info_});
  }
  return out;
}

}  // namespace baton::router
