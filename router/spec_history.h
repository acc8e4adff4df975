// SpecHistory: the speculative-decoding counters the decode nodes report in their NodeInfo
// (NodeLoad.counters.spec, monotonic since each node's start), sampled at every Info poll and kept
// for a few minutes, so the /dashboard page can show RECENT behaviour: the differences between
// consecutive samples, summed over a sliding window or per time bucket. A node that restarted
// (another instance_id, or counters that went down) contributes its new counters, not a negative
// difference.
//
// Memory is bounded: at most `max_samples_per_node` samples per node address (600 = five minutes
// at the pool's 500 ms poll).
//
// Thread-safety: all methods may be called from any thread. Must not: poll nodes itself (NodePool
// does and calls record()) or know about HTTP or JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "baton/v1/node.pb.h"
#include "router/recent_requests.h"

namespace baton::router {

// Speculative counts over some span (or since start).
struct SpecCounts {
  std::int64_t num_drafts = 0;
  std::int64_t num_draft_tokens = 0;
  std::int64_t num_accepted_tokens = 0;
  std::vector<std::int64_t> accepted_per_position;

  static SpecCounts from_proto(const baton::node::v1::SpecDecodeCounters& c);
  void add(const SpecCounts& other);
  // this - earlier, or nullopt when some counter went down (the node restarted).
  std::optional<SpecCounts> minus(const SpecCounts& earlier) const;

  // accepted / draft tokens; nullopt without draft tokens.
  std::optional<double> acceptance_rate() const;
  // Tokens a verify step yields per draft: 1 + accepted / drafts (vLLM's mean acceptance length).
  std::optional<double> mean_acceptance_length() const;
  // Position i's accepted count / drafts: how often the i-th draft token was accepted; empty
  // without drafts.
  std::vector<double> per_position_rates() const;
};

struct SpecHistoryOptions {
  std::size_t max_samples_per_node = 600;
};

class SpecHistory {
 public:
  explicit SpecHistory(SpecHistoryOptions options = {});

  // One Info of a decode node; nodes without a method are ignored.
  void record(const std::string& address, const baton::node::v1::NodeInfo& info, WallClock::time_point at);

  struct NodeSpec {
    std::string address;
    std::string method;
    int num_speculative_tokens = 0;
    SpecCounts window;       // over (now - span, now]
    SpecCounts since_start;  // the node's last report
  };
  std::vector<NodeSpec> nodes(WallClock::time_point now, std::chrono::seconds span) const;

  struct MethodSpec {
    std::string method;
    int num_speculative_tokens = 0;  // the largest among its nodes
    SpecCounts window;               // over (now - span, now], all its nodes
    std::vector<SpecCounts> buckets;  // aligned with `starts` below
  };
  struct MethodSeries {
    std::vector<WallClock::time_point> starts;  // bucket starts, oldest first; the last holds now
    std::vector<MethodSpec> methods;            // by name
  };
  MethodSeries by_method(WallClock::time_point now, std::chrono::seconds span, std::chrono::seconds bucket_width,
                         int num_buckets) const;

 private:
  struct Sample {
    WallClock::time_point at;
    std::uint64_t instance_id = 0;
    std::string method;
    int num_speculative_tokens = 0;
    SpecCounts counts;
  };
  // What happened between a node's sample i-1 and i (the new counters after a restart).
  static SpecCounts step(const std::deque<Sample>& samples, std::size_t i);

  const SpecHistoryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::deque<Sample>> samples_;  // by node address, oldest first
};

}  // namespace baton::router
