#include "engine/scheduler.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

Scheduler::Scheduler(const SchedulerConfig& config, KvBlockPool& pool) : config_(config), pool_(pool) {}

void Scheduler::add(Request* request) {
  request->state = RequestState::kWaiting;
  waiting_.push_back(request);
}

void Scheduler::remove(Request* request) {
  std::erase(running_, request);
  std::erase(waiting_, request);
  request->blocks.release_all(pool_);
}

void Scheduler::preempt(Request* request) {
  std::erase(running_, request);
  request->blocks.release_all(pool_);
  request->num_computed = 0;
  request->drafts.clear();
  request->draft_probs.clear();
  request->state = RequestState::kWaiting;
  ++request->num_preemptions;
  waiting_.push_front(request);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  std::int32_t budget = config_.max_num_batched_tokens;

  // Running requests, oldest first. Preemption victims come from the back, which has not been
  // scheduled yet this step (or is the request itself).
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const std::int32_t pending = r->num_tokens() - r->num_computed;
    BATON_CHECK(pending > 0, "running request ", r->id, " has nothing to compute");
    std::int32_t n = std::min(pending, budget);
    std::int32_t drafts = 0;
    if (pending == 1 && !r->drafts.empty()) {
      drafts = std::min(static_cast<std::int32_t>(r->drafts.size()), budget - 1);
      if (!r->draft_probs.empty()) {  // [drafts, vocab] rows: keep the first `drafts`
        r->draft_probs.resize(r->draft_probs.size() / r->drafts.size() * static_cast<std::size_t>(drafts));
      }
      r->drafts.resize(static_cast<std::size_t>(drafts));
      n += drafts;
    }
    bool fits = true;
    while (!r->blocks.grow_to(pool_, r->num_computed + n)) {
      Request* victim = running_.back();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == r) {
        fits = false;
        break;
      }
    }
    if (!fits) break;  // r itself was the last running request able to give blocks back
    out.chunks.push_back({r, r->num_computed, n, r->num_computed + n - drafts == r->num_tokens(), drafts});
    out.num_tokens += n;
    budget -= n;
    ++i;
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
  if (config_.enable_prefix_caching) {
    // Reuse whole cached blocks, but always compute at least the last token (its logits are
    // needed), so at most (num_tokens - 1) / block_size blocks come from the cache.
    const auto hit = pool_.match_prefix(r->tokens, (r->num_tokens() - 1) / bs);
    r->blocks.adopt_prefix(hit);
    r->num_computed = static_cast<std::int32_t>(hit.size()) * bs;
  }
  const std::int32_t remaining = r->num_tokens() - r->num_computed;
  const std::int32_t n = std::min(remaining, budget);
  if ((n < remaining && !config_.enable_chunked_prefill) || !r->blocks.grow_to(pool_, r->num_computed + n)) {
    r->blocks.release_all(pool_);
    r->num_computed = 0;
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
