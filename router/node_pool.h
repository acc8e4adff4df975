// The nodes the router knows: those given on the command line (static), those that registered,
// and those DNS discovery found (dns_discovery.h). A node may come from several sources at once
// (the same address is one node); it leaves the pool when its last source removes it, and a node
// with no static source is forgotten after it was unreachable (its Check failing) for
// `forget_unreachable_after`, so that pods that are gone for good are not polled forever. A node
// that leaves is only taken out of placement: requests already running on it keep their shared
// reference to it and finish there. For each,
// one gRPC channel and its stubs (reused by every request), and what the router last learned:
// grpc.health.v1 Check + Info, polled on a background thread with deadlines. A node is usable when
// Check says SERVING, Info answers and pairing.h's check_node() accepts it. A request-path call
// that fails with UNAVAILABLE or DEADLINE_EXCEEDED marks its node unusable at once (report_failure);
// the next poll that starts after that may restore it.
//
// choose() places one request (placement.h) and returns claims that make later choices see the
// blocks and prompt tokens sent to a node until that node's next Info shows them.
//
// Every change of a node's usability, every node added, removed or forgotten and every refused
// (P, D) pair is logged once per change.
// Thread-safety: all methods may be called from any thread. Must not: make request-path calls or
// decide anything about a request beyond where it runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/v1/node.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/grpc_status_name.h"
#include "router/pairing.h"
#include "router/placement.h"

namespace baton::router {

using Clock = std::chrono::steady_clock;

class NodePool;

// Where a node came from. Only kFlag nodes are never forgotten.
enum class NodeSource { kFlag, kRegistration, kDns };
const char* node_source_name(NodeSource source);

// One node: its address, what the router talks to it as, and a channel with stubs. The state
// below the stubs belongs to the pool (guarded by its mutex).
class Node {
 public:
  Node(NodeKind kind, std::string address);
  NodeKind kind() const { return kind_; }
  const std::string& address() const { return address_; }
  std::string label() const { return node_label(kind_, address_); }
  baton::node::v1::PrefillNode::Stub& prefill() const;  // kind() == kPrefill
  baton::node::v1::DecodeNode::Stub& decode() const;    // kind() == kDecode
  grpc::health::v1::Health::Stub& health() const { return *health_; }
  // Health polls in a row the node left unanswered (0 once one is answered); any thread.
  std::uint64_t unreachable_polls() const { return unreachable_polls_.load(std::memory_order_relaxed); }

 private:
  friend class NodePool;
  struct Claim {
    std::int64_t blocks = 0;
    std::int64_t tokens = 0;
    Clock::time_point at;
  };

  const NodeKind kind_;
  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<baton::node::v1::PrefillNode::Stub> prefill_;
  std::unique_ptr<baton::node::v1::DecodeNode::Stub> decode_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;

  // Guarded by NodePool::mu_.
  bool usable_ = false;
  std::string problem_ = "not polled yet";
  std::optional<baton::node::v1::NodeInfo> info_;
  Clock::time_point info_asked_at_{};     // when the Info in info_ was asked for
  Clock::time_point failed_at_{};         // the last request-path failure
  std::map<std::uint64_t, Claim> claims_;
  std::set<NodeSource> sources_;
  std::optional<Clock::time_point> unreachable_since_;  // the first failed Check of the current run
  std::atomic<std::uint64_t> unreachable_polls_{0};     // written under NodePool::mu_
};

// A request's share of a node's load, counted by choose() until the node's next Info; released on
// destruction. Move-only; the pool must outlive it.
class NodeClaim {
 public:
  NodeClaim() = default;
  NodeClaim(NodeClaim&& other) noexcept { *this = std::move(other); }
  NodeClaim& operator=(NodeClaim&& other) noexcept;
  ~NodeClaim() { reset(); }
  void reset();

 private:
  friend class NodePool;
  NodePool* pool_ = nullptr;
  std::shared_ptr<Node> node_;
  std::uint64_t id_ = 0;
};

struct ChosenNodes {
  std::shared_ptr<Node> decode;
  baton::node::v1::NodeInfo decode_info;
  std::shared_ptr<Node> prefill;  // null for local prefill
  baton::node::v1::NodeInfo prefill_info;
  PrefillSite site = PrefillSite::kPrefillNode;
  NodeClaim decode_claim;
  NodeClaim prefill_claim;
};

struct NodePoolOptions {
  std::vector<std::string> prefill_addresses;
  std::vector<std::string> decode_addresses;
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds node_timeout{5000};    // deadline of each Info
  // Deadline of each health Check: a node that leaves one unanswered is unusable for new requests
  // until one is answered again (a stopped node is noticed within poll_interval + this).
  std::chrono::milliseconds health_timeout{1000};
  // A registered or discovered node whose Check fails for this long leaves the pool; 0: never.
  std::chrono::milliseconds forget_unreachable_after{60000};
  // Called with every Info a node answers (on a gRPC thread, without the pool's lock held); may be
  // empty. The router's dashboard history (spec_history.h) listens here.
  std::function<void(const Node& node, const baton::node::v1::NodeInfo& info)> on_info;
  // Called after each poll's result is recorded (a node's Info or usability may have changed), on
  // a gRPC thread, without the pool's lock held; may be empty. The router's derived admission
  // limits follow the nodes here (admission_limits.h).
  std::function<void()> on_polled;
};

// A usable decode node's capacity as its last Info reported it.
struct DecodeCapacity {
  std::int32_t max_num_seqs = 0;  // 0: not reported (an older node)
  std::int32_t kv_blocks = 0;     // its target KV pool's blocks
};

struct NodeStatus {
  NodeKind kind;
  std::string address;
  bool usable;
  std::string problem;  // "" when usable
  std::set<NodeSource> sources;
  std::optional<baton::node::v1::NodeInfo> info;
};

class NodePool {
 public:
  explicit NodePool(NodePoolOptions options);
  ~NodePool();
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;

  // Polls every node once (bounded by the node timeout), then keeps polling on a thread.
  void start();
  void stop();
  // Adds a node, or `source` to the node with that kind and address (idempotent). INVALID_ARGUMENT
  // for an empty address; RESOURCE_EXHAUSTED when `max_from_source` nodes came from `source`
  // already (a bound on registrations).
  absl::Status add(NodeKind kind, const std::string& address, NodeSource source = NodeSource::kFlag,
                   std::size_t max_from_source = SIZE_MAX);
  // Takes `source` from the node; the node leaves the pool when no source is left (new requests
  // are no longer placed on it; running ones finish). Returns whether it left.
  bool remove(NodeKind kind, const std::string& address, NodeSource source);
  // Removes the nodes without a kFlag source whose Check has failed for forget_unreachable_after
  // (the polling thread calls it after every round). Returns their labels.
  std::vector<std::string> forget_unreachable(Clock::time_point now = Clock::now());
  // Wakes the polling thread for a round now (after a registration).
  void poll_soon();
  // One round over every node, blocking until each answered or timed out.
  void poll_once();

  // Places a request among the usable nodes, leaving out `excluded` addresses. UNAVAILABLE (naming
  // the decode nodes and why each is unusable) when no decode node is usable; see placement.h.
  absl::StatusOr<ChosenNodes> choose(const PlacementRequest& request, const std::set<std::string>& excluded = {});
  // After a request-path call failed: UNAVAILABLE and DEADLINE_EXCEEDED mark the node unusable.
  void report_failure(const Node& node, const grpc::Status& status);

  std::vector<NodeStatus> status() const;
  // What the usable decode nodes can hold (cheap: no Info is copied), for admission_limits.h.
  std::vector<DecodeCapacity> decode_capacities() const;
  // Every node's address (for redacting them from what clients see).
  std::vector<std::string> addresses() const;

 private:
  friend class NodeClaim;
  struct PollCall;
  struct Round;

  std::shared_ptr<Node> find_locked(NodeKind kind, const std::string& address) const;
  void poll_async(PollCall& call);
  // reachable: the node answered Check (whatever it said).
  void record_poll(Node& node, Clock::time_point started, const std::string& problem,
                   const baton::node::v1::NodeInfo* info, bool reachable);
  void apply_poll_locked(Node& node, Clock::time_point started, const std::string& problem,
                         const baton::node::v1::NodeInfo* info, bool reachable);  // mu_ held
  void log_pair_changes();
  NodeClaim claim_locked(const std::shared_ptr<Node>& node, std::int64_t blocks, std::int64_t tokens);
  void release_claim(Node& node, std::uint64_t id);
  NodeView view_locked(const Node& node) const;
  void run();

  const NodePoolOptions options_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Node>> nodes_;
  std::map<std::string, std::string> pair_refusals_;  // "P|D" -> the refusal last logged
  std::uint64_t next_claim_ = 1;
  bool stopping_ = false;
  bool wake_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace baton::router
