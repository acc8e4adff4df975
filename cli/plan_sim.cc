#include "cli/plan_sim.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <queue>
#include <random>

#include "common/status.h"

namespace baton::cli {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Request {
  const TraceRequest* trace = nullptr;
  int prefill_node = -1;
  int decode_node = -1;
  std::int32_t generated = 0;  // tokens after the first
  double first_token_at = -1;
  double done_at = -1;
};

// One engine process. `work_left` is seconds of its current forward at full speed.
struct Node {
  bool busy = false;
  double work_left = 0;
  double started_at = 0;
};

struct PrefillNode : Node {
  std::deque<int> queue;
  std::vector<int> batch;
  std::int64_t queued_tokens = 0;  // queue and batch
};

struct DecodeNode : Node {
  std::deque<int> to_prefill;  // colocated only
  std::deque<int> joining;     // KV landed, waiting for the next step
  std::vector<int> running;
  std::vector<int> prefilling;  // colocated: prompts inside the current step
  int load = 0;                 // requests placed here and not finished
};

struct Landing {
  double at;
  int request;
  bool operator>(const Landing& o) const { return at > o.at; }
};

class Simulation {
 public:
  Simulation(const DeploymentProfile& profile, const std::vector<TraceRequest>& trace, const Candidate& c)
      : profile_(profile), candidate_(c), rng_(c.seed), prefill_(static_cast<std::size_t>(c.num_prefill)),
        decode_(static_cast<std::size_t>(c.num_decode)) {
    requests_.resize(trace.size());
    for (std::size_t i = 0; i < trace.size(); ++i) requests_[i].trace = &trace[i];
  }

  absl::StatusOr<SimulationResult> run() {
    if (requests_.empty()) return SimulationResult{};
    now_ = requests_.front().trace->arrival_s;
    std::size_t next_arrival = 0;
    std::size_t done = 0;
    while (done < requests_.size()) {
      BATON_RETURN_IF_ERROR(start_idle_nodes());
      const double speed = current_speed();
      double dt = kInf;
      if (next_arrival < requests_.size()) dt = std::min(dt, requests_[next_arrival].trace->arrival_s - now_);
      if (!landings_.empty()) dt = std::min(dt, landings_.top().at - now_);
      for_each_busy([&](Node& n) { dt = std::min(dt, n.work_left / speed); });
      if (serving_work_ > 0) dt = std::min(dt, serving_work_ / speed);
      if (dt == kInf) return absl::InternalError("the simulation stalled with requests unfinished");
      dt = std::max(dt, 0.0);
      now_ += dt;
      for_each_busy([&](Node& n) { n.work_left = std::max(0.0, n.work_left - dt * speed); });
      serving_work_ = serving_work_ <= dt * speed + kDone ? 0.0 : serving_work_ - dt * speed;

      while (next_arrival < requests_.size() && requests_[next_arrival].trace->arrival_s <= now_) {
        place(static_cast<int>(next_arrival++));
      }
      while (!landings_.empty() && landings_.top().at <= now_) {
        const int r = landings_.top().request;
        landings_.pop();
        decode_[static_cast<std::size_t>(requests_[static_cast<std::size_t>(r)].decode_node)].joining.push_back(r);
      }
      for (PrefillNode& p : prefill_) {
        if (p.busy && p.work_left <= kDone) done += finish_prefill(p);
      }
      for (DecodeNode& d : decode_) {
        if (d.busy && d.work_left <= kDone) done += finish_step(d);
      }
    }
    SimulationResult result;
    double last = 0;
    for (const Request& r : requests_) {
      const double arrival = r.trace->arrival_s;
      result.requests.push_back({r.first_token_at - arrival, r.done_at - arrival, r.trace->output_tokens});
      last = std::max(last, r.done_at);
    }
    result.duration_s = last - requests_.front().trace->arrival_s;
    return result;
  }

 private:
  static constexpr double kDone = 1e-12;

  template <typename F>
  void for_each_busy(F f) {
    for (PrefillNode& p : prefill_) {
      if (p.busy) f(p);
    }
    for (DecodeNode& d : decode_) {
      if (d.busy) f(d);
    }
  }

  double current_speed() {
    if (candidate_.host_cores <= 0) return 1;
    int threads = 0;
    for_each_busy([&](Node&) { threads += std::max(1, profile_.threads); });
    if (serving_work_ > 0) ++threads;
    return threads <= candidate_.host_cores ? 1.0 : static_cast<double>(candidate_.host_cores) / threads;
  }

  Request& req(int r) { return requests_[static_cast<std::size_t>(r)]; }

  void place(int r) {
    Request& q = req(r);
    auto d = std::min_element(decode_.begin(), decode_.end(),
                              [](const DecodeNode& a, const DecodeNode& b) { return a.load < b.load; });
    q.decode_node = static_cast<int>(d - decode_.begin());
    ++d->load;
    if (prefill_.empty()) {
      d->to_prefill.push_back(r);
      return;
    }
    auto p = std::min_element(prefill_.begin(), prefill_.end(), [](const PrefillNode& a, const PrefillNode& b) {
      return a.queued_tokens < b.queued_tokens;
    });
    q.prefill_node = static_cast<int>(p - prefill_.begin());
    p->queue.push_back(r);
    p->queued_tokens += q.trace->prompt_tokens;
  }

  // Takes prompts first come, first served while they fit `budget` tokens (one at least).
  std::vector<int> take_prompts(std::deque<int>& queue, std::int64_t budget) {
    std::vector<int> batch;
    std::int64_t tokens = 0;
    while (!queue.empty()) {
      const std::int64_t next = req(queue.front()).trace->prompt_tokens;
      if (!batch.empty() && tokens + next > budget) break;
      tokens += next;
      batch.push_back(queue.front());
      queue.pop_front();
    }
    return batch;
  }

  double prefill_work(const std::vector<int>& batch) {
    if (batch.empty()) return 0;
    std::int64_t tokens = 0;
    for (int r : batch) tokens += req(r).trace->prompt_tokens;
    const int n = static_cast<int>(batch.size());
    return profile_.prefill_seconds(n, static_cast<int>((tokens + n - 1) / n));
  }

  absl::Status start_idle_nodes() {
    for (PrefillNode& p : prefill_) {
      if (p.busy || p.queue.empty()) continue;
      p.batch = take_prompts(p.queue, profile_.max_num_batched_tokens);
      start(p, prefill_work(p.batch));
    }
    for (DecodeNode& d : decode_) {
      if (d.busy) continue;
      while (!d.joining.empty() && static_cast<int>(d.running.size()) < profile_.max_num_seqs) {
        d.running.push_back(d.joining.front());
        d.joining.pop_front();
      }
      double work = 0;
      if (!d.running.empty()) {
        BATON_ASSIGN_OR_RETURN(work, profile_.decode_step_seconds(candidate_.k, static_cast<int>(d.running.size())));
      }
      const int room = profile_.max_num_seqs - static_cast<int>(d.running.size());
      if (room > 0 && !d.to_prefill.empty()) {
        const std::int64_t budget = std::max<std::int64_t>(
            1, profile_.max_num_batched_tokens - static_cast<std::int64_t>(d.running.size()) * (candidate_.k + 1));
        d.prefilling = take_prompts(d.to_prefill, budget);
        work += prefill_work(d.prefilling);
      }
      if (!d.running.empty() || !d.prefilling.empty()) start(d, work);
    }
    return absl::OkStatus();
  }

  void start(Node& n, double work) {
    n.busy = true;
    n.work_left = work;
    n.started_at = now_;
  }

  // Returns how many requests ended at their first token.
  std::size_t finish_prefill(PrefillNode& p) {
    p.busy = false;
    std::size_t finished = 0;
    const double forward = now_ - p.started_at;
    for (int r : p.batch) {
      Request& q = req(r);
      p.queued_tokens -= q.trace->prompt_tokens;
      const double bytes = static_cast<double>(q.trace->prompt_tokens) * profile_.kv_bytes_per_token;
      const double transfer = bytes / (profile_.kv_gbps * 1e9);
      const double tail =
          profile_.kv_latency_s + std::max(transfer / std::max(1, profile_.num_layers), transfer - forward);
      q.first_token_at = now_ + tail + profile_.request_overhead_s;
      if (q.trace->output_tokens <= 1) {
        q.done_at = q.first_token_at;
        --decode_[static_cast<std::size_t>(q.decode_node)].load;
        ++finished;
      } else {
        landings_.push({q.first_token_at, r});
      }
    }
    p.batch.clear();
    return finished;
  }

  // Drafts accepted in one step at k (P(n >= i) = acceptance[i - 1]).
  int accepted_drafts() {
    if (candidate_.k == 0) return 0;
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    int n = 0;
    while (n < candidate_.k && n < static_cast<int>(profile_.acceptance.size()) &&
           u < profile_.acceptance[static_cast<std::size_t>(n)]) {
      ++n;
    }
    return n;
  }

  // Returns how many requests finished (in the step, or colocated ones at their first token).
  std::size_t finish_step(DecodeNode& d) {
    d.busy = false;
    std::size_t finished = 0;
    std::vector<int> still;
    for (int r : d.running) {
      Request& q = req(r);
      const int tokens = 1 + accepted_drafts();
      q.generated += tokens;
      if (candidate_.host_cores > 0) serving_work_ += tokens * profile_.serving_cpu_per_token_s;
      if (q.generated >= q.trace->output_tokens - 1) {
        q.done_at = now_;
        --d.load;
        ++finished;
      } else {
        still.push_back(r);
      }
    }
    d.running = std::move(still);
    for (int r : d.prefilling) {
      Request& q = req(r);
      q.first_token_at = now_ + profile_.request_overhead_s;
      if (q.trace->output_tokens <= 1) {
        q.done_at = q.first_token_at;
        --d.load;
        ++finished;
      } else {
        landings_.push({q.first_token_at, r});  // decodes from its first token on, as after a hand-off
      }
    }
    d.prefilling.clear();
    return finished;
  }

  const DeploymentProfile& profile_;
  const Candidate candidate_;
  std::mt19937_64 rng_;
  std::vector<Request> requests_;
  std::vector<PrefillNode> prefill_;
  std::vector<DecodeNode> decode_;
  std::priority_queue<Landing, std::vector<Landing>, std::greater<>> landings_;
  double now_ = 0;
  // Shared cores only: CPU seconds of serving-path work (router, client, transports) not yet done.
  // It runs as one more busy thread and delays no token itself.
  double serving_work_ = 0;
};

}  // namespace

absl::StatusOr<SimulationResult> simulate(const DeploymentProfile& profile, const std::vector<TraceRequest>& trace,
                                          const Candidate& candidate) {
  if (candidate.num_decode < 1) return absl::InvalidArgumentError("a deployment needs at least one decode node");
  if (candidate.num_prefill < 0) return absl::InvalidArgumentError("the number of prefill nodes cannot be negative");
  if (candidate.k < 0) return absl::InvalidArgumentError("k cannot be negative");
  BATON_RETURN_IF_ERROR(profile.decode_step_seconds(candidate.k, 1).status());
  for (std::size_t i = 1; i < trace.size(); ++i) {
    if (trace[i].arrival_s < trace[i - 1].arrival_s) return absl::InvalidArgumentError("the trace is not sorted by arrival");
  }
  return Simulation(profile, trace, candidate).run();
}

}  // namespace baton::cli
