// MedusaHead: Medusa's draft heads (Cai et al. 2024) in vLLM's checkpoint layout, run on the
// target's Backend. Head i reads the target's final hidden state h_p (the final norm's output) at a
// position p and predicts the token at p + 2 + i; no head reads another's output, a token or any
// KV, so every head runs over the same rows and k drafts cost k small forwards, not k steps.
//
// Layout (config.json + safetensors; tensor names may carry vLLM's "medusa_heads." prefix):
//   blocks.{i}.layers.{l}.weight [hidden, hidden] (+ .bias with medusa_fc_bias): per layer
//     x = x + SiLU(W x + b), starting from x = h_p;
//   lm_heads.{i}.weight [V', hidden] per head, or one shared lm_head.weight (lm_heads.0.weight)
//     with original_lm_head; logits are scaled by logit_scale;
//   truncated_vocab_size < vocab_size: token_map [V'] I64 gives each logit index its target id;
//     heads stored over the whole vocabulary are cut to the token_map rows at load, as vLLM does.
// Config keys holding "num" and "heads" / "num" and "layers" (medusa_num_heads, num_heads, ...)
// give the head and layer counts (defaults 5 and 1), as vLLM's MedusaConfig reads them.
//
// It never writes the target's weights or states, and holds no per-request state (the proposer
// does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "kernels/backend.h"

namespace baton {

class MedusaHead {
 public:
  // max_rows: the most rows one forward runs (the engine's max_num_seqs); dtype: weight dtype
  // override (as the target's).
  static absl::StatusOr<std::unique_ptr<MedusaHead>> load(const std::string& dir, const ModelConfig& target,
                                                          Backend& backend, std::int32_t max_rows,
                                                          std::optional<DType> dtype);

  std::int32_t num_heads() const { return static_cast<std::int32_t>(heads_.size()); }
  std::int32_t num_layers() const { return num_layers_; }
  std::int32_t hidden() const { return hidden_; }
  std::int32_t out_vocab() const { return out_vocab_; }
  float logit_scale() const { return logit_scale_; }
  DType weight_dtype() const { return heads_.front().lm_head.dtype; }
  // Target id of logit index i (identity without a token_map).
  std::int32_t to_target_id(std::int32_t i) const {
    return token_map_.empty() ? i : token_map_[static_cast<std::size_t>(i)];
  }

  // The input rows for forward(): [rows <= max_rows, hidden] F32 on the backend, for the caller
  // to fill with target final hidden states.
  TensorView feature_input(std::int64_t rows) const;
  // Head `head` over the first `rows` rows of feature_input(): its logits [rows, out_vocab()] F32
  // on the backend, unscaled (logit_scale > 0 leaves the argmax alone; probabilistic drafting
  // scales on the host). Valid until the next call.
  TensorView forward(std::int32_t head, std::int64_t rows);

 private:
  struct Head {
    std::vector<TensorView> weights;  // per layer [hidden, hidden], linear() only
    std::vector<TensorView> biases;   // per layer [hidden] F32, or empty views
    TensorView lm_head;               // [out_vocab, hidden], linear() only (may be shared)
  };

  explicit MedusaHead(Backend& backend) : backend_(backend) {}

  Backend& backend_;
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::vector<DeviceBuffer> owned_;
  std::vector<Head> heads_;
  std::vector<std::int32_t> token_map_;
  std::int32_t num_layers_ = 0, hidden_ = 0, out_vocab_ = 0, max_rows_ = 0;
  float logit_scale_ = 1.0f;
  DeviceBuffer features_, x_, y_, logits_;  // [max_rows, hidden] x3, [max_rows, out_vocab]
};

}  // namespace baton
