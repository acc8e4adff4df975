// ModelWeights: the parameters of a decoder-only model as device TensorViews, loaded from a
// Checkpoint by the architecture's Hugging Face tensor names, with every shape and dtype checked.
//
// Layout choices made at load (the forward pass relies on them):
//  - q/k/v projections are fused into one [q + 2 kv, hidden] matrix (and biases into one vector),
//    gate/up into one [2 * intermediate, hidden] matrix, so each is one GEMM per layer (each
//    expert's gate/up likewise);
//  - norm weights and biases are F32 (zero-centred norms, ModelConfig::zero_centered_norms, with
//    their 1 added);
//  - Qwen3-Next's interleaved projections are regrouped by rows (see LayerWeights);
//  - the matrices linear() reads (layers' qkv, o_proj, gate_up, down, and lm_head) are in the
//    backend's packed layout when it has one (Backend::pack_linear_weight): pass them only to
//    linear(); a tied lm_head is then a packed copy of the embedding;
//  - other matrices keep their stored dtype (F32/BF16/F16) unless a dtype override is given, and
//    are read in place from the memory-mapped file when the backend can read host memory.
// A tensor that is missing, misshaped or of a non-float dtype is an error naming the file, the
// tensor, and the expected and found shape/dtype.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "kernels/backend.h"

namespace baton {

struct LayerWeights {
  TensorView input_norm;     // [hidden] F32
  // [q_size + 2 kv_size, hidden]; with an output gate (gated attention) the gate's q_size rows
  // follow: [q; k; v; gate].
  TensorView qkv;
  TensorView qkv_bias;       // [q_size + 2 kv_size] F32, or empty
  TensorView q_norm;         // [head_dim] F32, or empty (Qwen3)
  TensorView k_norm;         // [head_dim] F32, or empty
  TensorView o_proj;         // [hidden, q_size]
  TensorView o_bias;         // [hidden] F32, or empty
  TensorView post_norm;      // [hidden] F32
  TensorView gate_up;        // [2 intermediate, hidden] (a dense MLP)
  TensorView down;           // [hidden, intermediate]
  // A mixture-of-experts MLP instead (ModelConfig::sparse_mlp): the router [num_experts, hidden]
  // and each expert's [2 moe_intermediate, hidden] gate/up and [hidden, moe_intermediate] down.
  TensorView router;         // empty: the dense MLP
  MoeExperts experts;
  // A Gated DeltaNet token mixer instead of attention (ModelConfig::mixers; then qkv..o_bias are
  // empty). in_proj's rows are regrouped at load from the checkpoint's per-key-head interleaving
  // into [q (k_heads x key_dim); k; v (v_heads x value_dim); z; b (v_heads); a (v_heads)], so q, k
  // and v sit side by side as the convolution reads them.
  TensorView in_proj;     // [projection_width, hidden]
  TensorView conv;        // [conv_channels, conv_kernel] F32
  TensorView a_log;       // [v_heads] F32
  TensorView dt_bias;     // [v_heads] F32
  TensorView gated_norm;  // [value_head_dim] F32
  TensorView out_proj;    // [hidden, value_dim]
  // A Mamba-2 mixer (Nemotron-H) reuses in_proj [projection_width, hidden] (its rows as stored: z,
  // then x, B, C, then dt), conv [conv_channels, conv_kernel] F32, a_log and dt_bias [heads] F32,
  // gated_norm [inner] F32 and out_proj [hidden, inner], and adds:
  TensorView conv_bias;   // [conv_channels] F32, or empty
  TensorView d_skip;      // [heads] F32: D, the skip connection's per-head scale
  // A relu² MLP (Nemotron-H) has up [intermediate, hidden] instead of gate_up.
  TensorView up;
  MixerKind mixer = MixerKind::kAttention;
  bool linear_attention() const { return mixer == MixerKind::kLinearAttention; }
  bool has_mlp() const { return !gate_up.empty() || !up.empty() || !router.empty(); }
};

struct WeightLoadOptions {
  std::optional<DType> dtype;  // convert matrices and embeddings to this dtype (nullopt: as stored)
};

class ModelWeights {
 public:
  static absl::StatusOr<ModelWeights> load(const ModelConfig& config, std::shared_ptr<const Checkpoint> checkpoint,
                                           Backend& backend, const WeightLoadOptions& options = {});

  TensorView embed;       // [vocab, hidden]
  TensorView final_norm;  // [hidden] F32
  TensorView lm_head;     // [vocab, hidden] for linear() only (the embedding, or a packed copy of it, when tied)
  std::vector<LayerWeights> layers;

  // Bytes a decode step reads from weight matrices (every layer's matrices and the lm_head; the
  // embedding row lookup is negligible): the numerator of the memory-bandwidth floor.
  std::int64_t bytes_per_decode_step() const;
  // The dtype of the big matrices ("mixed" when they differ).
  std::string matrix_dtype() const;

 private:
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps in-place views valid
  std::vector<DeviceBuffer> owned_;
};

// Names of tensors a loader knowingly ignores (e.g. precomputed rotary tables).
bool is_ignorable_tensor(const std::string& name);

}  // namespace baton
