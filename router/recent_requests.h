// RecentRequests: the router's memory of the requests that finished in the last few minutes, for
// the /dashboard page (router/http/dashboard.h) — TTFT and TPOT percentiles, requests/s and output
// tokens/s per time bucket. Fed by MeasuringSink (router_metrics.h) whether or not Prometheus
// metrics are on.
//
// Memory is bounded: a ring of `num_buckets` buckets of `bucket_width` each (by default 60 x 5 s);
// a bucket counts every request exactly but keeps at most `max_samples_per_bucket` TTFT and TPOT
// values for its percentiles (a uniform reservoir sample past that). Times are wall-clock (the
// page's x axis); a bucket whose slot is reused, or a clock jump, just starts the bucket afresh.
//
// Thread-safety: all methods may be called from any thread. Must not: time anything itself (the
// caller says when a request ended) or know about HTTP or JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace baton::router {

using WallClock = std::chrono::system_clock;

// One finished request as the router's client saw it.
struct FinishedRequest {
  WallClock::time_point ended;
  bool got_first_token = false;
  double ttft_s = 0;
  double e2e_s = 0;
  std::int64_t output_tokens = 0;
  // (e2e - ttft) / (output tokens - 1); nullopt below 2 output tokens.
  std::optional<double> tpot_s() const;
};

struct RecentRequestsOptions {
  std::chrono::seconds bucket_width{5};
  int num_buckets = 60;
  int max_samples_per_bucket = 1024;
};

// One bucket's figures; percentiles are nullopt when no request in it had the value.
struct RequestBucket {
  WallClock::time_point start;
  std::int64_t requests = 0;
  std::int64_t output_tokens = 0;
  double requests_per_s = 0;
  double output_tokens_per_s = 0;
  std::optional<double> ttft_p50_s, ttft_p99_s, tpot_p50_s, tpot_p99_s;
};

// The `q` quantile (0..1) of `values` by the nearest-rank method; nullopt when empty. Reorders
// `values`.
std::optional<double> quantile(std::vector<double>& values, double q);

class RecentRequests {
 public:
  explicit RecentRequests(RecentRequestsOptions options = {});
  void record(const FinishedRequest& request);
  // Every bucket of the window ending with the one holding `now`, oldest first (empty buckets
  // included, with zeros). The current bucket's rates are over the part of it that has passed.
  std::vector<RequestBucket> buckets(WallClock::time_point now) const;
  const RecentRequestsOptions& options() const { return options_; }

 private:
  struct Slot {
    std::int64_t index = -1;  // bucket number since the epoch; -1: never used
    std::int64_t requests = 0;
    std::int64_t output_tokens = 0;
    std::int64_t ttft_seen = 0, tpot_seen = 0;  // values offered to the reservoirs
    std::vector<double> ttft_s, tpot_s;
  };
  std::int64_t bucket_index(WallClock::time_point t) const;
  std::size_t slot_of(std::int64_t index) const;
  void offer(std::vector<double>& reservoir, std::int64_t& seen, double value);

  const RecentRequestsOptions options_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  std::minstd_rand rng_;
};

}  // namespace baton::router
