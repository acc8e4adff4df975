// ForwardGraphs: which of a Transformer's forwards replay a captured graph (a CUDA graph on a GPU:
// one launch for the whole forward instead of one per op), and those graphs.
//
// Decode steps (one new token per sequence) and verification steps (up to k + 1 per sequence)
// keep their shape from step to step but for the number of sequences. Padded up to a bucket (1, 2,
// 4, 8, then multiples of 8 up to max_seqs) and each sequence up to the batch's longest, they fall
// into a few shapes, each captured the first time it is seen, right after running that forward
// eagerly (which also warms anything a kernel sets up on first use), and replayed from then on.
// (The engine shows each bucket's decode and verification shapes to the model as it starts:
// engine/engine_graphs.cc.) A verification whose sequences have fewer drafts than others (an
// n-gram proposer that matched for some requests only) replays the graph of its longest sequence.
// BatchPlan does the padding (filler tokens and sequences over blocks already read, writing no
// KV) and gives attention the bound max_model_len, so the launch values frozen in a graph hold for
// every batch of its shape.
//
// Forwards of any other shape — prefill chunks (longer than k + 1 tokens), sequences with logits
// at other positions than none, the last or all of their tokens, one with a per-layer callback (KV
// pushed layer by layer) — run eagerly.
//
// Must not: change a real sequence's result (kernels are batch-invariant, and padding only adds
// rows after the real ones); reuse a graph for another KV cache or other captures (they are part
// of the key); hide a failed capture (it is logged once, and graphs are off from then on).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "engine/model/batch_plan.h"
#include "engine/model/forward_batch.h"
#include "kernels/backend.h"

namespace baton {

// Everything besides the plan's contents that a captured forward depends on.
struct GraphKey {
  GraphShape shape;
  // The caller's own choices of ops and buffers (the Transformer: the hidden states it captures; a
  // draft head: its module, where its features come from).
  std::vector<std::int64_t> variant;
  const void* kv_cache = nullptr;  // the cache's first layer
  std::int64_t kv_blocks = 0;
  bool operator==(const GraphKey&) const = default;
};

struct GraphStats {
  std::int64_t captured = 0;  // graphs made
  std::int64_t replays = 0;   // forwards replayed from one
  std::int64_t eager = 0;     // forwards run op by op (including each graph's first)
};

class ForwardGraphs {
 public:
  // max_seqs: the largest padded batch to capture (0: none); max_tokens_per_seq: the most new
  // tokens per sequence (1 for decode, k + 1 for verification; longer chunks are prefill, whose
  // lengths vary too much to capture); `limits`: the plan's.
  ForwardGraphs(std::int64_t max_seqs, std::int32_t max_tokens_per_seq, const BatchLimits& limits);

  bool enabled() const { return enabled_; }
  // The padded shape `batch` replays in, or nullopt when it runs eagerly.
  std::optional<GraphShape> shape_for(const ForwardBatch& batch) const;

  // Runs the forward of `key`: replays its graph if there is one; else runs `enqueue` (the
  // forward's ops) eagerly, then captures it into a graph for next time.
  void run(const GraphKey& key, Backend& backend, absl::FunctionRef<void()> enqueue);
  // A forward that does not replay (no shape, or graphs off).
  void count_eager() { ++stats_.eager; }

  const GraphStats& stats() const { return stats_; }

  // The padded batch sizes captured for max_seqs: 1, 2, 4, 8, then multiples of 8.
  static std::vector<std::int64_t> buckets(std::int64_t max_seqs);

 private:
  std::vector<std::int64_t> buckets_;
  std::int32_t max_tokens_per_seq_ = 0;
  BatchLimits limits_;
  bool enabled_ = false;
  std::vector<std::pair<GraphKey, std::unique_ptr<OpGraph>>> graphs_;  // a few dozen at most
  GraphStats stats_;
};

}  // namespace baton
