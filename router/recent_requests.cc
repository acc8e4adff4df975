#include "router/recent_requests.h"

#include <algorithm>
#include <cmath>

namespace baton::router {

std::optional<double> FinishedRequest::tpot_s() const {
  if (!got_first_token || output_tokens < 2) return std::nullopt;
  return (e2e_s - ttft_s) / static_cast<double>(output_tokens - 1);
}

std::optional<double> quantile(std::vector<double>& values, double q) {
  if (values.empty()) return std::nullopt;
  // Nearest rank: the smallest value with at least q of the values at or below it.
  const auto n = static_cast<double>(values.size());
  std::size_t rank = static_cast<std::size_t>(std::ceil(q * n));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank - 1), values.end());
  return values[rank - 1];
}

RecentRequests::RecentRequests(RecentRequestsOptions options)
    : options_(options), slots_(static_cast<std::size_t>(std::max(1, options.num_buckets))) {}

std::int64_t RecentRequests::bucket_index(WallClock::time_point t) const {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const auto width = std::chrono::duration_cast<std::chrono::milliseconds>(options_.bucket_width).count();
  // Floor division (times before the epoch only in tests).
  return ms >= 0 ? ms / width : -((-ms + width - 1) / width);
}

std::size_t RecentRequests::slot_of(std::int64_t index) const {
  const auto n = static_cast<std::int64_t>(slots_.size());
  return static_cast<std::size_t>(((index % n) + n) % n);
}

void RecentRequests::offer(std::vector<double>& reservoir, std::int64_t& seen, double value) {
  ++seen;
  const auto cap = static_cast<std::size_t>(options_.max_samples_per_bucket);
  if (reservoir.size() < cap) {
    reservoir.push_back(value);
    return;
  }
  // Algorithm R: each of the `seen` values stays with probability cap / seen.
  const auto j = static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(seen));
  if (j < static_cast<std::int64_t>(cap)) reservoir[static_cast<std::size_t>(j)] = value;
}

void RecentRequests::record(const FinishedRequest& r) {
  const std::int64_t index = bucket_index(r.ended);
  std::lock_guard lock(mu_);
  Slot& s = slots_[slot_of(index)];
  if (s.index != index) {
    if (s.index > index) return;  // older than the window this slot holds now
    s = Slot{};
    s.index = index;
  }
  ++s.requests;
  s.output_tokens += r.output_tokens;
  if (r.got_first_token) offer(s.ttft_s, s.ttft_seen, r.ttft_s);
  if (auto tpot = r.tpot_s()) offer(s.tpot_s, s.tpot_seen, *tpot);
}

std::vector<RequestBucket> RecentRequests::buckets(WallClock::time_point now) const {
  const std::int64_t last = bucket_index(now);
  const auto n = static_cast<std::int64_t>(slots_.size());
  const double width_s = std::chrono::duration<double>(options_.bucket_width).count();
  std::vector<RequestBucket> out;
  out.reserve(slots_.size());
  std::lock_guard lock(mu_);
  for (std::int64_t index = last - n + 1; index <= last; ++index) {
    RequestBucket b;
    b.start = WallClock::time_point(std::chrono::duration_cast<WallClock::duration>(options_.bucket_width * index));
    const Slot& s = slots_[slot_of(index)];
    if (s.index == index) {
      double span_s = width_s;
      if (index == last) span_s = std::max(1e-3, std::chrono::duration<double>(now - b.start).count());
      b.requests = s.requests;
      b.output_tokens = s.output_tokens;
      b.requests_per_s = static_cast<double>(s.requests) / span_s;
      b.output_tokens_per_s = static_cast<double>(s.output_tokens) / span_s;
      std::vector<double> ttft = s.ttft_s, tpot = s.tpot_s;
      b.ttft_p50_s = quantile(ttft, 0.5);
      b.ttft_p99_s = quantile(ttft, 0.99);
      b.tpot_p50_s = quantile(tpot, 0.5);
      b.tpot_p99_s = quantile(tpot, 0.99);
    }
    out.push_back(b);
  }
  return out;
}

}  // namespace baton::router
