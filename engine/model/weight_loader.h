// WeightLoader: turns named checkpoint tensors into device TensorViews with exactly the shapes a
// model expects — in place from the memory map when the backend can read it and no dtype change is
// asked for, otherwise converted into backend buffers (fused row-wise when several tensors form one
// matrix; norms and biases always F32). Errors name the file, the tensor, the expected and found
// shape/dtype. Used for target models and draft heads alike; it knows tensor names only as strings.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "kernels/backend.h"

namespace baton {

class WeightLoader {
 public:
  // `what` names the model in messages (e.g. "LlamaForCausalLM"); buffers it creates go to `owned`.
  WeightLoader(std::string what, const Checkpoint& ckpt, Backend& backend, const WeightLoadOptions& options,
               std::vector<DeviceBuffer>* owned)
      : what_(std::move(what)), ckpt_(ckpt), backend_(backend), options_(options), owned_(owned) {}

  bool has(const std::string& name) const { return ckpt_.find(name) != nullptr; }

  // The float tensor `name` with exactly `shape` (`meaning` explains the shape in errors).
  absl::StatusOr<const TensorInfo*> get(const std::string& name, const std::vector<std::int64_t>& shape,
                                        const char* meaning);
  // A matrix (or embedding table), stored dtype unless overridden; in place when possible.
  absl::StatusOr<TensorView> matrix(const std::string& name, std::int64_t rows, std::int64_t cols, const char* meaning);
  // Row-wise concatenation of [r_i, cols] matrices into one [sum r_i, cols] buffer.
  absl::StatusOr<TensorView> fused(const std::vector<std::pair<std::string, std::int64_t>>& parts, std::int64_t cols,
                                   const char* meaning);
  // A matrix used only as a linear() weight, in the backend's packed layout when it has one
  // (Backend::pack_linear_weight); `w` itself when not. When `w` is the buffer this loader made
  // last (a fused or converted staging copy), that copy is freed once packed. The result may only
  // be passed to linear().
  absl::StatusOr<TensorView> for_linear(const TensorView& w);
  // Rows [begin, end) of checkpoint matrices, stacked in the order given into one [sum, cols]
  // matrix (a regrouping of interleaved rows). Each tensor must be [rows, cols].
  struct RowRange {
    std::string name;
    std::int64_t rows = 0;  // the tensor's
    std::int64_t begin = 0, end = 0;
  };
  absl::StatusOr<TensorView> regrouped(const std::vector<RowRange>& ranges, std::int64_t cols, const char* meaning);
  // Vectors (norm weights, biases) as one F32 vector, concatenated in order, `plus` added to every
  // element (1 for a zero-centred norm's weight).
  absl::StatusOr<TensorView> vector_f32(const std::vector<std::pair<std::string, std::int64_t>>& parts,
                                        const char* meaning, float plus = 0.0f);
  // An RMSNorm weight [n] as the forward pass uses it (1 + w for zero-centred norms).
  absl::StatusOr<TensorView> norm(const ModelConfig& c, const std::string& name, std::int64_t n, const char* meaning) {
    return vector_f32({{name, n}}, meaning, c.zero_centered_norms ? 1.0f : 0.0f);
  }
  // An I64 vector read to the host (e.g. EAGLE-3's d2t).
  absl::StatusOr<std::vector<std::int64_t>> int64_vector(const std::string& name, std::int64_t n, const char* meaning);

  // One decoder layer under `prefix` ("model.layers.3."): q/k/v/o, MLP, post-attention norm, and —
  // when asked — the input norm, q/k/v biases, o bias and q/k norms. in_width is the q/k/v input
  // width (hidden_size, or 2 * hidden_size for EAGLE-3).
  struct LayerSpec {
    bool input_norm = true;
    std::int64_t in_width = 0;
    bool experts = false;  // a mixture-of-experts MLP (mlp.gate, mlp.experts.E.*) instead of the dense one
    bool linear_attention = false;  // a Gated DeltaNet mixer (linear_attn.*) instead of attention
  };
  absl::StatusOr<LayerWeights> layer(const ModelConfig& c, const std::string& prefix, const LayerSpec& spec);
  // Nemotron-H block `layer` under `prefix` ("backbone.layers.3."): its norm (as input_norm) and its
  // one sublayer (mixer.*): Mamba-2, attention, or the relu² MLP (weight_loader_nemotron_h.cc).
  absl::StatusOr<LayerWeights> nemotron_h_block(const ModelConfig& c, const std::string& prefix, std::int32_t layer);

  const std::set<std::string>& used() const { return used_; }

 private:
  // A layer's router and experts (Qwen3-MoE's and Qwen2-MoE's names) into l.router and l.experts.
  absl::Status experts(const ModelConfig& c, const std::string& prefix, LayerWeights& l);
  // A layer's attention: plain, Qwen3-Next's gated one (q_proj's per-head [query; gate] rows
  // regrouped), and what both share (q/k norms, o_proj); or Gated DeltaNet instead.
  absl::Status attention(const ModelConfig& c, const std::string& prefix, std::int64_t in, LayerWeights& l);
  absl::Status gated_attention(const ModelConfig& c, const std::string& prefix, std::int64_t in, LayerWeights& l);
  absl::Status attention_tail(const ModelConfig& c, const std::string& prefix, LayerWeights& l);
  absl::Status linear_attention(const ModelConfig& c, const std::string& prefix, LayerWeights& l);
  // What follows in_proj (packed here): conv, A_log, dt_bias, the gated norm and out_proj.
  absl::Status linear_attention_tail(const ModelConfig& c, const std::string& prefix, LayerWeights& l);
  absl::Status mamba2(const ModelConfig& c, const std::string& prefix, LayerWeights& l);
  struct Slice {
    const TensorInfo* tensor;
    std::int64_t begin, end;  // rows
  };
  // The slices' rows, converted to `target`, stacked into one new [sum, cols] buffer.
  absl::StatusOr<TensorView> upload(const std::vector<Slice>& slices, DType target, std::int64_t cols,
                                    float plus = 0.0f);

  std::string what_;
  const Checkpoint& ckpt_;
  Backend& backend_;
  const WeightLoadOptions& options_;
  std::vector<DeviceBuffer>* owned_;
  std::set<std::string> used_;
};

}  // namespace baton
