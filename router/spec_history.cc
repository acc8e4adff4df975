#include "router/spec_history.h"

#include <algorithm>

namespace baton::router {

SpecCounts SpecCounts::from_proto(const baton::node::v1::SpecDecodeCounters& c) {
  SpecCounts s;
  s.num_drafts = c.num_drafts();
  s.num_draft_tokens = c.num_draft_tokens();
  s.num_accepted_tokens = c.num_accepted_tokens();
  s.accepted_per_position.assign(c.accepted_per_position().begin(), c.accepted_per_position().end());
  return s;
}

void SpecCounts::add(const SpecCounts& other) {
  num_drafts += other.num_drafts;
  num_draft_tokens += other.num_draft_tokens;
  num_accepted_tokens += other.num_accepted_tokens;
  if (accepted_per_position.size() < other.accepted_per_position.size()) {
    accepted_per_position.resize(other.accepted_per_position.size(), 0);
  }
  for (std::size_t i = 0; i < other.accepted_per_position.size(); ++i) {
    accepted_per_position[i] += other.accepted_per_position[i];
  }
}

std::optional<SpecCounts> SpecCounts::minus(const SpecCounts& earlier) const {
  if (accepted_per_position.size() != earlier.accepted_per_position.size() && !earlier.accepted_per_position.empty()) {
    return std::nullopt;  // another k: another process
  }
  SpecCounts d;
  d.num_drafts = num_drafts - earlier.num_drafts;
  d.num_draft_tokens = num_draft_tokens - earlier.num_draft_tokens;
  d.num_accepted_tokens = num_accepted_tokens - earlier.num_accepted_tokens;
  d.accepted_per_position = accepted_per_position;
  for (std::size_t i = 0; i < earlier.accepted_per_position.size(); ++i) {
    d.accepted_per_position[i] -= earlier.accepted_per_position[i];
    if (d.accepted_per_position[i] < 0) return std::nullopt;
  }
  if (d.num_drafts < 0 || d.num_draft_tokens < 0 || d.num_accepted_tokens < 0) return std::nullopt;
  return d;
}

std::optional<double> SpecCounts::acceptance_rate() const {
  if (num_draft_tokens <= 0) return std::nullopt;
  return static_cast<double>(num_accepted_tokens) / static_cast<double>(num_draft_tokens);
}

std::optional<double> SpecCounts::mean_acceptance_length() const {
  if (num_drafts <= 0) return std::nullopt;
  return 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts);
}

std::vector<double> SpecCounts::per_position_rates() const {
  std::vector<double> out;
  if (num_drafts <= 0) return out;
  for (std::int64_t a : accepted_per_position) out.push_back(static_cast<double>(a) / static_cast<double>(num_drafts));
  return out;
}

SpecHistory::SpecHistory(SpecHistoryOptions options) : options_(options) {}

void SpecHistory::record(const std::string& address, const baton::node::v1::NodeInfo& info, WallClock::time_point at) {
  if (info.speculative_method().empty()) return;
  Sample s;
  s.at = at;
  s.instance_id = info.instance_id();
  s.method = info.speculative_method();
  s.num_speculative_tokens = info.num_speculative_tokens();
  s.counts = SpecCounts::from_proto(info.load().counters().spec());
  std::lock_guard lock(mu_);
  std::deque<Sample>& samples = samples_[address];
  samples.push_back(std::move(s));
  while (samples.size() > std::max<std::size_t>(2, options_.max_samples_per_node)) samples.pop_front();
}

SpecCounts SpecHistory::step(const std::deque<Sample>& samples, std::size_t i) {
  const Sample& now = samples[i];
  const Sample& before = samples[i - 1];
  if (now.instance_id == before.instance_id) {
    if (auto d = now.counts.minus(before.counts)) return *d;
  }
  return now.counts;  // restarted in between: everything it counted is new
}

std::vector<SpecHistory::NodeSpec> SpecHistory::nodes(WallClock::time_point now, std::chrono::seconds span) const {
  std::vector<NodeSpec> out;
  std::lock_guard lock(mu_);
  for (const auto& [address, samples] : samples_) {
    NodeSpec n;
    n.address = address;
    n.method = samples.back().method;
    n.num_speculative_tokens = samples.back().num_speculative_tokens;
    n.since_start = samples.back().counts;
    for (std::size_t i = 1; i < samples.size(); ++i) {
      if (samples[i].at > now - span && samples[i].at <= now) n.window.add(step(samples, i));
    }
    out.push_back(std::move(n));
  }
  return out;
}

SpecHistory::MethodSeries SpecHistory::by_method(WallClock::time_point now, std::chrono::seconds span,
                                                 std::chrono::seconds bucket_width, int num_buckets) const {
  MethodSeries out;
  const auto width = std::chrono::duration_cast<WallClock::duration>(bucket_width);
  // Buckets aligned to multiples of the width since the epoch, like RecentRequests'.
  const WallClock::time_point last_start(now.time_since_epoch() / width * width);
  const WallClock::time_point first_start = last_start - width * (num_buckets - 1);
  for (int b = 0; b < num_buckets; ++b) out.starts.push_back(first_start + width * b);
  std::map<std::string, MethodSpec> methods;
  std::lock_guard lock(mu_);
  for (const auto& [address, samples] : samples_) {
    for (std::size_t i = 1; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      MethodSpec& m = methods[s.method];
      if (m.buckets.empty()) {
        m.method = s.method;
        m.buckets.resize(static_cast<std::size_t>(num_buckets));
      }
      m.num_speculative_tokens = std::max(m.num_speculative_tokens, s.num_speculative_tokens);
      if (s.at > now) continue;
      const SpecCounts d = step(samples, i);
      if (s.at > now - span) m.window.add(d);
      if (s.at >= first_start) m.buckets[static_cast<std::size_t>((s.at - first_start) / width)].add(d);
    }
  }
  for (auto& [name, m] : methods) out.methods.push_back(std::move(m));
  return out;
}

}  // namespace baton::router
