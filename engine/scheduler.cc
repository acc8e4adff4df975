#include "engine/scheduler.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

Scheduler::Scheduler(const SchedulerConfig& config, KvBlockPool& pool, bool speculative, StateGroupPool* states)
    : config_(config), pool_(pool), speculative_(speculative), states_(states) {
  BATON_CHECK(states_ == nullptr || !config_.enable_prefix_caching, "prefix caching with recurrent state");
}

void Scheduler::release_state(Request* request) {
  if (request->state_group >= 0) states_->free(request->state_group);
  request->state_group = -1;
  request->state_slot = -1;
}

void Scheduler::add(Request* request) {
  request->state = RequestState::kWaiting;
  waiting_.push_back(request);
}

void Scheduler::add_ready(Request* request) {
  request->state = RequestState::kRunning;
  ready_.push_back(request);
  promote_ready();
}

void Scheduler::promote_ready() {
  while (!ready_.empty() && running_.size() < static_cast<std::size_t>(config_.max_num_seqs)) {
    running_.push_back(ready_.front());
    ready_.pop_front();
  }
}

void Scheduler::remove(Request* request) {
  detach(request);
  request->blocks.release_all(pool_);
  release_state(request);
}

void Scheduler::detach(Request* request) {
  std::erase(running_, request);
  std::erase(waiting_, request);
  std::erase(ready_, request);
}

void Scheduler::preempt(Request* request) {
  std::erase(running_, request);
  request->blocks.release_all(pool_);
  release_state(request);
  request->num_computed = 0;
  request->drafts.clear();
  request->draft_probs.clear();
  request->needs_drafts = false;
  request->starved = false;
  request->state = RequestState::kWaiting;
  ++request->num_preemptions;
  waiting_.push_front(request);
}

std::int32_t Scheduler::compute_target(const Request& r) const {
  return speculative_ && r.num_output() > 0 ? r.num_tokens() - 1 : r.num_tokens();
}

bool Scheduler::schedule_running(Request* r, std::int32_t& budget, SchedulerOutput& out,
                                 std::vector<Request*>& scheduled) {
  ScheduledChunk c{r, r->num_computed, 0, false, 0};
  if (r->decoding()) {
    // The pending token and every draft, or nothing.
    c.num_drafts = static_cast<std::int32_t>(r->drafts.size());
    c.num_tokens = 1 + c.num_drafts;
    c.samples = true;
    if (c.num_tokens > budget) {
      r->starved = true;
      return true;
    }
  } else {
    const std::int32_t pending = compute_target(*r) - r->num_computed;
    BATON_CHECK(pending > 0, "running request ", r->id, " has nothing to compute");
    c.num_tokens = std::min(pending, budget);
    c.samples = r->num_computed + c.num_tokens == r->num_tokens();
  }
  while (!r->blocks.grow_to(pool_, r->num_computed + c.num_tokens)) {
    // The most recently admitted request not scheduled yet this step (possibly r itself).
    Request* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (std::find(scheduled.begin(), scheduled.end(), *it) == scheduled.end()) {
        victim = *it;
        break;
      }
    }
    BATON_CHECK(victim != nullptr, "no preemption victim for ", r->id);
    preempt(victim);
    out.preempted.push_back(victim);
    if (victim == r) return false;
  }
  r->starved = false;
  scheduled.push_back(r);
  out.chunks.push_back(c);
  out.num_tokens += c.num_tokens;
  budget -= c.num_tokens;
  return true;
}

const SchedulerOutput& Scheduler::schedule() {
  SchedulerOutput& out = out_;
  out.chunks.clear();
  out.preempted.clear();
  out.num_tokens = 0;
  std::int32_t budget = config_.max_num_batched_tokens;

  // Running requests: those starved of budget last step first, then the rest, oldest first.
  std::vector<Request*>& order = order_;
  order.clear();
  for (Request* r : running_) {
    if (r->starved) order.push_back(r);
  }
  for (Request* r : running_) {
    if (!r->starved) order.push_back(r);
  }
  std::vector<Request*>& scheduled = scheduled_;
  scheduled.clear();
  for (Request* r : order) {
    if (r->state != RequestState::kRunning) continue;  // preempted earlier in this loop
    if (budget <= 0) {
      if (r->decoding()) r->starved = true;
      continue;
    }
    schedule_running(r, budget, out, scheduled);
  }

  // Waiting requests in order, unless this step already had to preempt (memory is tight).
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<std::size_t>(config_.max_num_seqs)) {
    Request* r = waiting_.front();
    if (!admit(r, budget, &out)) break;
    waiting_.pop_front();
    budget = config_.max_num_batched_tokens - out.num_tokens;
  }
  return out;
}

bool Scheduler::admit(Request* r, std::int32_t budget, SchedulerOutput* out) {
  BATON_CHECK(r->num_computed == 0 && r->blocks.num_blocks() == 0, "admitting request ", r->id, " that holds KV");
  const std::int32_t bs = pool_.block_size();
  const std::int32_t target = compute_target(*r);
  if (config_.enable_prefix_caching) {
    // Reuse whole cached blocks, but always compute at least the last token of the target (its
    // logits, or its verification, are needed), so at most (target - 1) / block_size blocks come
    // from the cache.
    std::vector<BlockId> hit = pool_.match_prefix(r->tokens, (target - 1) / bs, r->blocks.salt());
    if (prefix_limit_.adopt) {
      const auto held = static_cast<std::size_t>(prefix_limit_.adopt(*r, static_cast<std::int32_t>(hit.size()) * bs) / bs);
      if (held < hit.size()) {
        pool_.unmatch(std::span<const BlockId>(hit).subspan(held));
        hit.resize(held);
      }
    }
    r->blocks.adopt_prefix(hit);
    r->num_computed = static_cast<std::int32_t>(hit.size()) * bs;
  }
  const std::int32_t remaining = target - r->num_computed;
  const std::int32_t n = std::min(remaining, budget);
  if (states_ != nullptr) r->state_group = states_->allocate();
  if ((n < remaining && !config_.enable_chunked_prefill) || (states_ != nullptr && r->state_group < 0) ||
      !r->blocks.grow_to(pool_, r->num_computed + n)) {
    r->blocks.release_all(pool_);
    r->num_computed = 0;
    if (states_ != nullptr) release_state(r);
    if (config_.enable_prefix_caching && prefix_limit_.release) prefix_limit_.release(*r);
    return false;
  }
  if (r->num_preemptions == 0) r->num_cached_prompt = std::min(r->num_computed, r->prompt_len);
  r->state = RequestState::kRunning;
  running_.push_back(r);
  out->chunks.push_back({r, r->num_computed, n, r->num_computed + n == r->num_tokens()});
  out->num_tokens += n;
  return true;
}

}  // namespace baton
