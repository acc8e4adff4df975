// Scheduler: the continuous-batching policy. Each step it picks which requests run and how many
// of their tokens, under a token budget: running requests first (a decode step is one token, a
// prefill continues in chunks), then committed hand-offs waiting for a running slot, then waiting
// requests in arrival order. It allocates their KV blocks (using the prefix cache for new prompts)
// and, when blocks run out, preempts the most recently admitted running request that is not
// scheduled yet by recompute (its blocks are freed; it re-enters the waiting queue at the front
// and later recomputes prompt + output).
//
// Speculation never depends on the budget: a decoding request with drafts is scheduled for its
// pending token and ALL its drafts, or not at all this step (it then goes first next step), so a
// request's draft count — and with it its seeded tokens — is a function of the request alone.
// With speculation on, a preempted request recomputes up to its pending token only, and verifies
// that token with fresh drafts as it would have without the preemption.
//
// Prefix caching with a proposer that drafts from the target's hidden states (EAGLE, MTP): a hit
// skips the target's forward over the cached positions, so their states never reach the proposer;
// it keeps its own cache of head KV instead, and a prompt reuses no more than both caches hold
// (PrefixReuseLimit).
//
// Hybrid models: a running request also holds a recurrent state group (StateGroupPool), taken at
// admission (a request waits while none is free) and freed with its blocks on preemption and
// removal; prefix caching is off for them (a hit would skip positions whose state it needs).
//
// It never runs the model or samples; the Engine does, with what schedule() returns.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/state_cache.h"
#include "engine/request.h"

namespace baton {

struct SchedulerConfig {
  std::int32_t max_num_batched_tokens = 2048;  // token budget per step
  std::int32_t max_num_seqs = 64;              // running requests at once
  bool enable_chunked_prefill = true;          // split long prompts across steps
  bool enable_prefix_caching = true;
};

// Who else must hold a prompt's cached prefix for the target to reuse it (see the header comment).
struct PrefixReuseLimit {
  // A request being admitted whose first `positions` positions the target's cache holds: takes
  // what the partner holds of them and returns how many leading positions that is (<= positions).
  std::function<std::int32_t(const Request&, std::int32_t positions)> adopt;
  // The admission did not go ahead after adopt(): give back what it took.
  std::function<void(const Request&)> release;
};

struct ScheduledChunk {
  Request* request = nullptr;
  std::int32_t start = 0;       // first token position computed this step
  std::int32_t num_tokens = 0;  // tokens computed this step, drafts included
  bool samples = false;         // the chunk reaches the last known token: its logits give the next one
  std::int32_t num_drafts = 0;  // the last num_drafts tokens are the request's drafts, to verify
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Request*> preempted;
  std::int32_t num_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // `speculative`: the engine verifies drafts (see the header comment for what changes).
  // `states`: the recurrent state groups of a hybrid model (nullptr otherwise).
  Scheduler(const SchedulerConfig& config, KvBlockPool& pool, bool speculative, StateGroupPool* states = nullptr);

  // Set once, before any request arrives.
  void limit_prefix_reuse(PrefixReuseLimit limit) { prefix_limit_ = std::move(limit); }

  void add(Request* request);
  // A request that already holds the KV of its prompt (a committed hand-off): it runs as soon as a
  // running slot is free, before waiting requests.
  void add_ready(Request* request);
  // Moves ready requests into free running slots. The engine calls it before it proposes drafts
  // for the step, so a promoted request is never scheduled without its drafts.
  void promote_ready();
  // Removes a request wherever it is and frees its blocks.
  void remove(Request* request);
  // Removes a request but leaves its blocks with it (a prefilled request kept for a hand-off).
  void detach(Request* request);
  // The plan is this object's own, valid until the next schedule() (its vectors are reused, so a
  // step allocates nothing here once they have grown).
  const SchedulerOutput& schedule();

  bool has_work() const { return !waiting_.empty() || !running_.empty() || !ready_.empty(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  std::size_t num_running() const { return running_.size(); }
  std::size_t num_ready() const { return ready_.size(); }
  const std::vector<Request*>& running() const { return running_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt(Request* request);
  void release_state(Request* request);
  // Tokens of `r` to compute before it samples or verifies: all of them, except that with
  // speculation a request with output recomputes up to its pending token only.
  std::int32_t compute_target(const Request& r) const;
  // Schedules running request r; false if it could not get blocks even after preempting.
  bool schedule_running(Request* r, std::int32_t& budget, SchedulerOutput& out, std::vector<Request*>& scheduled);
  bool admit(Request* request, std::int32_t budget, SchedulerOutput* out);

  SchedulerConfig config_;
  KvBlockPool& pool_;
  bool speculative_;
  StateGroupPool* states_;
  PrefixReuseLimit prefix_limit_;
  std::deque<Request*> waiting_;
  std::deque<Request*> ready_;
  std::vector<Request*> running_;  // in admission order; preemption takes from the back
  SchedulerOutput out_;                            // schedule()'s result
  std::vector<Request*> order_, scheduled_;         // schedule()'s scratch
};

}  // namespace baton
