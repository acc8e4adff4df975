// DFlashDrafter: the DFlash block-diffusion drafter, loaded from the published checkpoint layout
// (z-lab's DFlashDraftModel, as vLLM and SGLang load it; docs/engine.md, "DFlash") and run on the
// target's Backend with its own paged KV.
//
// It drafts all k tokens of a step in ONE forward. The drafter's context is the target's hidden
// states: at every final position p, several target layers' outputs are fused (fc, then the
// hidden_norm RMSNorm) into c_p, and each draft layer's own k_proj/v_proj (k_norm, RoPE at p) turn
// c_p into that layer's key and value at p, written to the paged KV once (write_context). A draft
// step then runs the query block [newest token, mask x k] at positions n-1 .. n-1+k through the
// draft layers (plain Qwen3 layers, full-attention or sliding-window, with or without attention
// biases): its queries attend over the context (a sliding-window layer: its last `window`
// positions) and over the block: all of it in a non-causal layer, the block's earlier tokens in a
// causal one (sliding-window layers are causal unless the config says otherwise). The logits at
// block positions 1..k (through the target's LM head unless the checkpoint has its own) give the
// k drafts (draft()).
//
// Non-causal attention without a kernel of its own: paged attention lets a query see keys up to
// the position its AttentionBatch says, so each block query is given its block's LAST position
// there, while RoPE and KV slots use the real positions.
//
// Graphs (engine/model/forward_graphs.h, where the engine uses them): a block forward has k + 1
// tokens per sequence every step, so it replays a captured graph per padded batch size. A graph's
// shape has logits at none, the last or every token, so a replayed block computes logits at every
// row and the rows 1..k are gathered after the replay; the per-call uploads (the batch plan, the
// block queries' attention positions, that gather's index) stay outside the graph. Context writes
// (write_context) vary in length and run op by op.
//
// It never owns target weights (embedding and LM head are views of the target's unless the
// checkpoint ships its own) and never touches the target's KV.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/batch_plan.h"
#include "engine/model/config.h"
#include "engine/model/decoder_layer.h"
#include "engine/model/forward_graphs.h"
#include "engine/model/weights.h"
#include "engine/spec/model_proposer.h"

namespace baton {

struct DFlashOptions {
  std::int32_t max_context_tokens = 0;  // target positions one write_context() takes (the token budget)
  std::int32_t max_num_seqs = 0;
  std::int32_t max_model_len = 0;
  std::int32_t block_size = 16;  // KV block size (not the drafter's trained block)
  std::int32_t num_speculative_tokens = 0;  // k: a query block holds up to k + 1 tokens
  std::optional<DType> dtype;
  // Block forwards replay captured graphs for batches of up to this many sequences (0: never);
  // the engine's graph_max_seqs.
  std::int32_t graph_max_seqs = 0;
};

class DFlashDrafter {
 public:
  static absl::StatusOr<std::unique_ptr<DFlashDrafter>> load(const std::string& dir, const ModelConfig& target,
                                                             const ModelWeights& target_weights, Backend& backend,
                                                             const DFlashOptions& options);

  // The target states it reads: target_layer_ids (HF hidden_states[id + 1]) as layer inputs
  // id + 1, the last layer's as the final-norm output.
  TargetStateSpec target_states() const;
  std::int32_t target_feature_width() const { return target_hidden_ * static_cast<std::int32_t>(layer_ids_.size()); }
  KvCacheLayout kv_layout() const;  // one KV layer per draft layer
  const ModelConfig& layer_config() const { return config_; }
  DType weight_dtype() const { return fc_.dtype; }
  std::int32_t mask_token_id() const { return mask_token_id_; }
  // Per draft layer, e.g. "non-causal, causal window 256": how each layer's block queries attend.
  std::string attention_kinds() const;
  std::int32_t out_vocab() const { return out_vocab_; }
  // Target id of output index i (identity unless the checkpoint has a draft vocabulary, d2t).
  std::int32_t to_target_id(std::int32_t i) const { return d2t_.empty() ? i : i + d2t_[static_cast<std::size_t>(i)]; }

  // The input buffer for write_context()'s features, [tokens, target_feature_width()] F32 on the
  // backend (tokens <= max_context_tokens), for the caller to fill.
  TensorView feature_input(std::int64_t tokens) const;

  // Context K/V of the batch's tokens (their ids are not read) into every draft layer's KV.
  // features: [batch tokens, target_feature_width()] F32, row i the target states of token i.
  absl::Status write_context(const ForwardBatch& batch, const TensorView& features, KvCache& cache);

  // Runs query blocks: sequence j is [newest token, mask x k_j] from the position after its
  // context, with logits_indices 1..k_j. Returns the logits rows [sum k_j, out_vocab()] on the
  // backend, valid until the next call.
  absl::StatusOr<TensorView> draft(const ForwardBatch& batch, KvCache& cache);

  // The block forwards: captured graphs, replays, and forwards run op by op.
  const GraphStats& graph_stats() const { return graphs_->stats(); }

 private:
  explicit DFlashDrafter(Backend& backend) : backend_(backend) {}
  absl::Status read_config(const std::string& dir, const ModelConfig& target);
  absl::Status load_weights(const std::string& dir, const ModelConfig& target, const ModelWeights& target_weights,
                            const DFlashOptions& options);
  absl::Status allocate(const DFlashOptions& options, std::int32_t vocab);
  // The block forward's ops from the plan's token ids to n_logits rows of logits; no uploads.
  void enqueue_block(std::int64_t t, std::int64_t n_logits, const LayerBatch& lb, const TensorView& block_positions,
                     KvCache& cache, const TensorView& logits);

  Backend& backend_;
  ModelConfig config_;  // the draft layers' shape
  std::int32_t target_hidden_ = 0, target_layers_ = 0;
  std::vector<std::int32_t> layer_ids_;  // target_layer_ids, as listed
  std::int32_t mask_token_id_ = 0;
  std::int32_t trained_block_ = 0;  // the block size it was trained on (0: not stated)
  std::vector<bool> layer_causal_;  // per draft layer: block query i sees block keys 0..i only
  std::int32_t out_vocab_ = 0;
  std::vector<std::int32_t> d2t_;

  std::shared_ptr<const Checkpoint> checkpoint_;
  std::vector<DeviceBuffer> owned_;
  std::vector<LayerWeights> layers_;
  TensorView fc_;           // [hidden, target_feature_width()] linear() weight
  TensorView hidden_norm_;  // [hidden]
  TensorView context_kv_;   // [layers * 2 kv_size, hidden]: each layer's k_proj then v_proj rows
  TensorView context_kv_bias_;  // [layers * 2 kv_size] F32 (attention_bias), else empty
  TensorView norm_;         // [hidden]
  TensorView lm_head_;      // [out_vocab, hidden]
  TensorView embed_;        // [vocab, hidden]

  std::int32_t kv_block_size_ = 16;
  std::int32_t max_context_tokens_ = 0, max_block_tokens_ = 0, max_logits_ = 0;
  BatchPlan context_plan_, block_plan_;
  LayerWorkspace workspace_;
  std::vector<std::int32_t> mask_positions_;  // host side of attention_positions_
  DeviceBuffer inv_freq_, features_, fused_, fused_normed_, context_kv_out_, context_cos_sin_;
  DeviceBuffer resid_, cos_sin_, attention_positions_, selected_, selected_normed_, logits_;
  // Graphs: the replayed forward's logits at every row, and the index of the rows 1..k in them.
  std::unique_ptr<ForwardGraphs> graphs_;
  GraphKey graph_key_;
  std::vector<std::int32_t> every_row_;      // 0..k: logits at every block token
  ForwardBatch every_batch_;                 // a draft's batch asked that way (capacity kept)
  std::vector<std::int32_t> rows_wanted_;    // host side of wanted_rows_
  DeviceBuffer all_logits_, wanted_rows_;
};

}  // namespace baton
