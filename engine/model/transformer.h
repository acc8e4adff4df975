// Transformer: the decoder-only forward pass (Llama, Mistral, Qwen2, Qwen3, their MoE variants and
// the Qwen3-Next hybrid — their differences are flags in ModelConfig) over a varlen batch, a paged
// KV cache for its attention layers and, for a hybrid, a recurrent state cache for its
// linear-attention layers, on any Backend.
//
// forward() writes the new tokens' keys/values into their KV slots, then returns logits for the
// requested positions (and optionally hidden states). Buffers are allocated once, at create() and
// reserve_captures(), for the largest batch the options allow; forward() itself allocates nothing
// on the device (so a device backend can capture it in a graph) and never reads activations on the
// host. Every op is batch-invariant, so a token's logits are
// bit-identical however it is batched.
//
// With graph_max_seqs > 0, decode- and verification-shaped forwards are padded and replayed from
// captured graphs (forward_graphs.h); the outputs are the same views, cut to the real rows.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/state_cache.h"
#include "engine/model/batch_plan.h"
#include "engine/model/decoder_layer.h"
#include "engine/model/config.h"
#include "engine/model/forward_batch.h"
#include "engine/model/forward_graphs.h"
#include "engine/model/weights.h"
#include "kernels/backend.h"

namespace baton {

struct TransformerOptions {
  std::int32_t max_num_tokens = 2048;  // new tokens per forward (the scheduler's token budget)
  std::int32_t max_num_seqs = 64;      // sequences per forward
  std::int32_t max_num_logits = 0;     // rows of logits per forward; 0: max_num_seqs * 9, capped by max_num_tokens
  std::int32_t max_model_len = 0;      // longest sequence; 0: the config's max_position_embeddings
  std::int32_t block_size = 16;
  // Largest padded batch (sequences) replayed from a captured graph; 0: every forward runs op by op.
  std::int32_t graph_max_seqs = 0;
  // Most new tokens per sequence in a graph: 1 (decode), or k + 1 with speculative decoding.
  std::int32_t graph_max_tokens_per_seq = 1;
};

// The recurrent state a model with linear-attention layers keeps per request, with `slots` slots
// per group (num_layers 0 for a model without such layers).
StateCacheLayout recurrent_state_layout(const ModelConfig& config, std::int32_t slots);

class Transformer {
 public:
  static absl::StatusOr<std::unique_ptr<Transformer>> create(Backend& backend, const ModelConfig& config,
                                                             ModelWeights weights, const TransformerOptions& options);

  // InvalidArgument when the batch breaks the options' limits or its own consistency (a block table
  // too short for its positions, a logits index outside its tokens, a token outside the vocabulary).
  // A model with linear-attention layers needs `state_cache` (of state_layout()'s layout, any slot
  // count); the batch's sequences then name their state groups and slots (ForwardSequence).
  absl::StatusOr<ForwardOutput> forward(const ForwardBatch& batch, KvCache& kv_cache,
                                        StateCache* state_cache = nullptr);

  // Buffers for hidden-state captures (ForwardBatch::capture_layer_inputs / capture_final_hidden),
  // made before the first forward that asks for them: `layer_inputs` captured layers at most, and
  // the final norm's output if `final_hidden`. A forward asking for more is refused. Calling it
  // again only grows the reservation.
  absl::Status reserve_captures(std::size_t layer_inputs, bool final_hidden);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const TransformerOptions& options() const { return options_; }
  const GraphStats& graph_stats() const { return graphs_->stats(); }
  Backend& backend() { return backend_; }
  // The KV layout this model needs, in the backend's activation dtype; a cache of any dtype the
  // backend supports_kv_cache_dtype() serves it as well.
  KvCacheLayout kv_layout() const;  // its num_layers counts the attention layers only
  // The recurrent state this model keeps per request, with `slots` slots per group; num_layers 0
  // for a model without linear-attention layers.
  StateCacheLayout state_layout(std::int32_t slots) const { return recurrent_state_layout(config_, slots); }

 private:
  Transformer(Backend& backend, const ModelConfig& config, ModelWeights weights, const TransformerOptions& options);
  absl::Status allocate_workspace();
  // Layer `layer` over the residual stream. The layer before it left its MLP output in the layer
  // scratch's hidden (layers after the first): it is added to the residual in one pass with this
  // layer's input norm. Layer inputs to capture are copied once that add is done; this layer's
  // MLP output is left in the scratch in turn.
  void layer_forward(std::int32_t layer, std::int64_t tokens, KvCache& kv_cache, StateCache* state_cache,
                     const ForwardBatch& batch, const ForwardOutput& out);
  // Every op of a forward over the planned batch (t tokens, n_logits rows, padding included) into
  // `out`'s views: what runs eagerly and what a graph captures.
  void enqueue_forward(const ForwardBatch& batch, KvCache& kv_cache, StateCache* state_cache, std::int64_t t,
                       std::int64_t n_logits, const ForwardOutput& out);

  Backend& backend_;
  ModelConfig config_;
  ModelWeights weights_;
  TransformerOptions options_;
  BatchPlan plan_;
  std::unique_ptr<ForwardGraphs> graphs_;
  GraphKey graph_key_;  // rebuilt per forward, its vector's capacity kept (no allocation per step)
  // Per layer: its index among the attention layers (the KV cache's layer) or among the
  // linear-attention layers (the state cache's), -1 where it is the other kind.
  std::vector<std::int32_t> kv_index_, state_index_;

  // Device workspace.
  DeviceBuffer inv_freq_;
  LayerWorkspace layer_workspace_;
  DeviceBuffer residual_, cos_sin_, selected_, logits_;
  std::vector<DeviceBuffer> captures_;
  DeviceBuffer final_hidden_;
};

}  // namespace baton
