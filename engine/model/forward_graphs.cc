#include "engine/model/forward_graphs.h"

#include <algorithm>

#include "spdlog/spdlog.h"

namespace baton {

std::vector<std::int64_t> ForwardGraphs::buckets(std::int64_t max_seqs) {
  std::vector<std::int64_t> b;
  for (std::int64_t n : {1, 2, 4}) {
    if (n <= max_seqs) b.push_back(n);
  }
  for (std::int64_t n = 8; n <= max_seqs; n += 8) b.push_back(n);
  if (max_seqs > 0 && b.back() != max_seqs) b.push_back(max_seqs);
  return b;
}

ForwardGraphs::ForwardGraphs(std::int64_t max_seqs, std::int32_t max_tokens_per_seq, const BatchLimits& limits)
    : buckets_(buckets(max_seqs)),
      max_tokens_per_seq_(max_tokens_per_seq),
      limits_(limits),
      enabled_(max_seqs > 0 && max_tokens_per_seq > 0) {}

std::optional<GraphShape> ForwardGraphs::shape_for(const ForwardBatch& batch) const {
  if (!enabled_ || batch.on_layer_written || batch.sequences.empty()) return std::nullopt;
  std::int32_t q = 0;  // the longest sequence's new tokens: every sequence pads to it
  for (const ForwardSequence& s : batch.sequences) q = std::max(q, static_cast<std::int32_t>(s.tokens.size()));
  if (q == 0 || q > max_tokens_per_seq_) return std::nullopt;
  // Logits at every token, the last, or none: the first the batch fits.
  const auto seqs = static_cast<std::int64_t>(batch.sequences.size());
  std::int32_t logits = -1;
  for (const std::int32_t l : {q, 1, 0}) {
    if (fits_shape(batch, GraphShape{seqs, q, l})) {
      logits = l;
      break;
    }
  }
  if (logits < 0) return std::nullopt;
  for (std::int64_t n : buckets_) {
    if (n < seqs) continue;
    if (n > limits_.max_num_seqs || n * q > limits_.max_num_tokens || n * logits > limits_.max_num_logits) break;
    return GraphShape{n, q, logits};
  }
  return std::nullopt;
}

void ForwardGraphs::run(const GraphKey& key, Backend& backend, absl::FunctionRef<void()> enqueue) {
  for (auto& [k, graph] : graphs_) {
    if (k == key) {
      graph->replay();
      ++stats_.replays;
      return;
    }
  }
  enqueue();
  ++stats_.eager;
  absl::Status status = backend.begin_capture();
  if (status.ok()) {
    enqueue();
    absl::StatusOr<std::unique_ptr<OpGraph>> graph = backend.end_capture();
    if (graph.ok()) {
      graphs_.emplace_back(key, std::move(*graph));
      ++stats_.captured;
      return;
    }
    status = graph.status();
  }
  spdlog::warn("graphs are off from now on: capturing a forward of {} sequences x {} tokens failed: {}",
               key.shape.num_seqs, key.shape.tokens_per_seq, status.ToString());
  enabled_ = false;
}

}  // namespace baton
