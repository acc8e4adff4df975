// Scheduler: the continuous-batching policy. Each step it picks which requests run and how many
// of their tokens, under a token budget: running requests first (a decode step is one token, a
// prefill continues in chunks), then waiting ones in arrival order. It allocates their KV blocks
// (using the prefix cache for new prompts) and, when blocks run out, preempts the most recently
// arrived running request by recompute (its blocks are freed; it re-enters the waiting queue at
// the front and later recomputes prompt + output). A decoding request with drafts is scheduled for
// 1 + drafts tokens (its pending token and the drafts to verify), drafts trimmed to the budget.
//
// It never runs the model or samples; the Engine does, with what schedule() returns.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/request.h"

namespace baton {

struct SchedulerConfig {
  std::int32_t max_num_batched_tokens = 2048;  // token budget per step
  std::int32_t max_num_seqs = 64;              // running requests at once
  bool enable_chunked_prefill = true;          // split long prompts across steps
  bool enable_prefix_caching = true;
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
  Scheduler(const SchedulerConfig& config, KvBlockPool& pool);

  void add(Request* request);
  // Removes a request wherever it is and frees its blocks.
  void remove(Request* request);
  SchedulerOutput schedule();

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  std::size_t num_running() const { return running_.size(); }
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt(Request* request);
  bool admit(Request* request, std::int32_t budget, SchedulerOutput* out);

  SchedulerConfig config_;
  KvBlockPool& pool_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // in admission order; preemption takes from the back
};

}  // namespace baton
