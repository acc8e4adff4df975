// Capturing the target's step graphs when the engine starts (engine/model/forward_graphs.h), so
// that no request's step pays for a capture and a backend that cannot capture is found out before
// serving: one decode forward (and, with speculative decoding, one verification forward of k + 1
// tokens) per batch bucket, each writing KV only into blocks borrowed from the still-empty pool and
// handed back at once. Shapes seen only later (a short prompt tail) are still captured on first use.
#include "common/status.h"
#include "engine/engine.h"
#include "spdlog/spdlog.h"

namespace baton {

absl::Status Engine::capture_step_graphs() {
  const TransformerOptions& o = model_->options();
  if (o.graph_max_seqs <= 0) return absl::OkStatus();
  const TargetStateSpec states = speculator_ ? speculator_->target_states() : TargetStateSpec{};
  std::vector<std::int32_t> lengths = {1};
  if (speculator_) lengths.push_back(speculator_->config().num_speculative_tokens + 1);
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t made = 0;
  for (const std::int32_t q : lengths) {
    const std::vector<std::int32_t> tokens(static_cast<std::size_t>(q), 0);
    std::vector<std::int32_t> logits(static_cast<std::size_t>(q));
    for (std::int32_t j = 0; j < q; ++j) logits[static_cast<std::size_t>(j)] = j;  // a verification's
    const std::int32_t blocks_per_seq = BlockTable::blocks_for(q, config_.block_size);
    for (const std::int64_t n : ForwardGraphs::buckets(o.graph_max_seqs)) {
      if (n * q > o.max_num_tokens || n * q > o.max_num_logits) break;
      auto blocks = pool_->allocate(static_cast<std::int32_t>(n) * blocks_per_seq);
      if (!blocks) break;  // a cache too small for this batch never runs it
      ForwardBatch batch;
      for (std::int64_t s = 0; s < n; ++s) {
        ForwardSequence seq;
        seq.tokens = tokens;
        seq.start_position = 0;
        seq.block_table = std::span<const BlockId>(*blocks).subspan(static_cast<std::size_t>(s * blocks_per_seq),
                                                                    static_cast<std::size_t>(blocks_per_seq));
        seq.logits_indices = logits;
        if (state_cache_) seq.state_group = static_cast<std::int32_t>(s);  // no request holds one yet
        batch.sequences.push_back(seq);
      }
      batch.capture_layer_inputs.assign(states.layer_inputs.begin(), states.layer_inputs.end());
      batch.capture_final_hidden = states.final_hidden;
      const std::int64_t captured = model_->graph_stats().captured;
      const absl::StatusOr<ForwardOutput> out = model_->forward(batch, *cache_, state_cache_.get());
      pool_->release(*blocks);
      BATON_RETURN_IF_ERROR(out.status());
      if (model_->graph_stats().captured == captured) break;  // graphs went off: the warning says why
      ++made;
    }
  }
  backend_->synchronize();
  spdlog::info("captured {} step graphs in {:.2f} s", made,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return absl::OkStatus();
}

}  // namespace baton
