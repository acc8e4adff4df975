// DraftHead: the small networks that draft from the target's hidden states — EAGLE-1, EAGLE-3 and
// MTP (DeepSeek-V3 and Qwen3-Next layouts) — loaded from their public checkpoint layouts
// (docs/engine.md, "Speculative configuration") and run on the target's Backend with their own paged KV.
//
// A head "position p" consumes (feature f_p, token t_{p+1}) and predicts the token at p + 2. The
// feature is the target's state at p (final-norm output; EAGLE-3: three layer inputs) during
// catch-up, or the head's own previous output while drafting. The head never owns target weights:
// embeddings and, where the layout says so, the LM head are views of the target's.
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
#include "engine/spec/config.h"
#include "engine/spec/model_proposer.h"

namespace baton {

enum class HeadKind { kEagle1, kEagle3, kMtpDeepSeek, kMtpQwen3Next };

// One draft layer with its input fusion and output head.
struct HeadModule {
  TensorView fuse;         // EAGLE-1 fc [H, 2H]; EAGLE-3 fc [H, 3 H_t]; MTP eh_proj / mtp.fc [H, 2H]; linear() only (may be packed)
  TensorView fuse_bias;    // EAGLE-1 fc.bias, or empty
  TensorView embed_norm;   // EAGLE-3 input_layernorm; MTP enorm / pre_fc_norm_embedding
  TensorView hidden_norm;  // EAGLE-3 hidden_norm; MTP hnorm / pre_fc_norm_hidden
  LayerWeights layer;      // its input_norm is empty for EAGLE-1 and EAGLE-3
  TensorView out_norm;     // EAGLE-3 norm; MTP shared_head.norm / mtp.norm; empty for EAGLE-1
  TensorView lm_head;      // [out_vocab, H]: its own, or the target's; linear() only (may be packed)
  TensorView embed;        // [vocab, H]: the target's, or the MTP layer's own copy
};

struct HeadOptions {
  std::int32_t max_num_tokens = 0;
  std::int32_t max_num_seqs = 0;
  std::int32_t max_model_len = 0;
  std::int32_t block_size = 16;
  std::optional<DType> dtype;
  // Forwards with features in feature_input() replay captured graphs for batches of up to this
  // many sequences (engine/model/forward_graphs.h); 0: never. Drafting steps add one token per
  // sequence; catch-ups up to k + 2 (the accepted drafts, the correction or bonus token, and the
  // position recomputed from the last step), padded to the batch's longest.
  std::int32_t graph_max_seqs = 0;
  // k, the drafts per step (0: one per module), which bounds a catch-up's tokens per sequence.
  std::int32_t num_speculative_tokens = 0;
};

// What a forward gives for its logits rows. The views are the head's own buffers, valid until its
// next forward.
struct HeadOutput {
  TensorView device_logits;    // [rows, out_vocab()] on the backend
  std::vector<float> logits;   // [rows, out_vocab()] host, when forward() was asked for them
  TensorView outputs;          // [rows, hidden()] on the backend: the state fed back at the next step
                               // (the pre-norm output; normed for Qwen3-Next's MTP)
};

class DraftHead {
 public:
  // dir: the head checkpoint (for MTP, the directory holding the MTP tensors: the speculative
  // config's `model`, or the target's own directory).
  static absl::StatusOr<std::unique_ptr<DraftHead>> load(SpecMethod method, const std::string& dir,
                                                         const ModelConfig& target, const ModelWeights& target_weights,
                                                         Backend& backend, const HeadOptions& options);

  HeadKind kind() const { return kind_; }
  std::int32_t num_modules() const { return static_cast<std::int32_t>(modules_.size()); }
  std::int32_t hidden() const { return config_.hidden_size; }
  std::int32_t out_vocab() const { return out_vocab_; }
  // Target id of head output index i (identity except EAGLE-3's draft vocabulary).
  std::int32_t to_target_id(std::int32_t i) const { return d2t_.empty() ? i : i + d2t_[static_cast<std::size_t>(i)]; }
  TargetStateSpec target_states() const;
  std::int32_t target_feature_width() const;  // floats per token of target features
  KvCacheLayout kv_layout() const;            // one layer per module
  const ModelConfig& layer_config() const { return config_; }
  DType weight_dtype() const { return modules_.front().fuse.dtype; }

  // The head's input buffer for a forward's features, [tokens, width] F32 on the backend
  // (tokens <= max_num_tokens, width <= max(hidden(), target_feature_width())), for the caller to
  // fill and pass to forward().
  TensorView feature_input(std::int64_t tokens, std::int64_t width) const;

  // Runs module `m` over a batch. features: [batch tokens, width] on the backend — target features
  // (from_target; width target_feature_width()) or the head's own outputs (width hidden()).
  // logits_to_host: also copy the logits rows to HeadOutput::logits (probabilistic drafting).
  absl::StatusOr<HeadOutput> forward(std::int32_t m, const ForwardBatch& batch, const TensorView& features,
                                     bool from_target, KvCache& cache, bool logits_to_host);
  const GraphStats& graph_stats() const { return graphs_->stats(); }

 private:
  DraftHead(Backend& backend) : backend_(backend) {}
  absl::Status allocate(const HeadOptions& options, std::int32_t vocab);
  // Module m's ops over the planned batch (t tokens, n_logits rows, padding included; the first
  // real_t tokens are the batch's own).
  void enqueue_forward(const HeadModule& m, std::int32_t mi, const TensorView& feat, bool from_target, KvCache& cache,
                       std::int64_t t, std::int64_t real_t, std::int64_t n_logits, const TensorView& head_in,
                       const TensorView& logits);

  Backend& backend_;
  HeadKind kind_ = HeadKind::kEagle1;
  ModelConfig config_;               // the draft layer's shape
  std::int32_t target_hidden_ = 0;
  std::int32_t out_vocab_ = 0;
  std::vector<std::int32_t> d2t_;    // EAGLE-3
  std::vector<std::int32_t> aux_layers_;  // EAGLE-3
  bool norm_before_residual_ = false;
  std::vector<HeadModule> modules_;
  std::vector<DeviceBuffer> owned_;
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::int32_t max_num_logits_ = 0, max_num_tokens_ = 0;
  std::int32_t block_size_ = 16;
  BatchPlan plan_;
  std::unique_ptr<ForwardGraphs> graphs_;
  GraphKey graph_key_;  // rebuilt per forward, its vector's capacity kept
  LayerWorkspace layer_workspace_;
  DeviceBuffer inv_freq_, features_, emb_, cat_, resid_, cos_sin_, selected_, selected_normed_, logits_, zero_row_;
};

}  // namespace baton
