// ModelConfig: what Baton needs from a Hugging Face model directory's config.json and
// generation_config.json, validated, with Hugging Face's defaults for absent keys.
//
// Supported: LlamaForCausalLM (Llama 2, 3, 3.1 with llama3 rope scaling), MistralForCausalLM
// (sliding window), Qwen2ForCausalLM (q/k/v bias, optional per-layer sliding window),
// Qwen3ForCausalLM (per-head q/k RMSNorm), Qwen3MoeForCausalLM (Qwen3 with mixture-of-experts
// MLPs: softmax router, top-k experts, norm_topk_prob, decoder_sparse_step, mlp_only_layers),
// Qwen2MoeForCausalLM (Qwen2 attention, the same experts plus a shared expert behind a sigmoid
// gate), Qwen3NextForCausalLM (a hybrid: Gated DeltaNet linear-attention layers interleaved with
// gated full attention — an output gate, partial rotary, per-head q/k norms — zero-centred RMSNorm
// weights, and Qwen2-MoE-style experts with a shared expert), Qwen3_5ForCausalLM and the text
// model of Qwen3_5ForConditionalGeneration (Qwen3-Next's layers with separate DeltaNet projections
// and dense MLPs; config_qwen3_5.h), NemotronHForCausalLM (a hybrid whose
// blocks each hold one sublayer — a Mamba-2 mixer, attention without positional encoding, or a
// relu² MLP — after one RMSNorm; config_nemotron_h.h). Anything else, or a feature of these we do
// not implement (quantization, other rope scalings, other activations, MLP bias, Nemotron-H's MoE
// blocks), is an error that names the file and key — never a silently different model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "nlohmann/json_fwd.hpp"

namespace baton {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3, kQwen3Moe, kQwen2Moe, kQwen3Next, kQwen35, kNemotronH };

// What mixes tokens in a layer: softmax attention over the paged KV cache, a recurrence over a
// fixed-size per-request state (Gated DeltaNet linear attention, or Mamba-2's SSD), or nothing (a
// Nemotron-H MLP block). The recurrent kinds are the layers with a StateCache slice.
enum class MixerKind : std::uint8_t { kAttention, kLinearAttention, kMamba2, kNone };

// A dense MLP's shape: SiLU(gate) * up (gate_proj and up_proj), or relu(up)² (Nemotron-H's up_proj
// only).
enum class MlpActivation : std::uint8_t { kSiluGated, kReluSquared };

// A Mamba-2 mixer (Nemotron-H's mamba_* / ssm_* keys). Head h reads the B and C of group
// h / (num_heads / num_groups). in_proj yields [z (inner) | x, B, C (conv_channels) | dt (num_heads)].
struct Mamba2Config {
  std::int32_t num_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t state_size = 0;  // N: the state of a head is [head_dim, state_size]
  std::int32_t num_groups = 0;
  std::int32_t conv_kernel = 0;
  bool conv_bias = false;
  float dt_min = 0.0f;  // time_step_limit: dt = clamp(softplus(dt + dt_bias), dt_min, dt_max)
  float dt_max = 0.0f;  // +inf when unbounded

  std::int64_t inner() const { return static_cast<std::int64_t>(num_heads) * head_dim; }
  std::int64_t conv_channels() const { return inner() + 2LL * num_groups * state_size; }
  std::int64_t projection_width() const { return inner() + conv_channels() + num_heads; }
  std::int64_t conv_state_floats() const { return (conv_kernel - 1) * conv_channels(); }
  std::int64_t recurrent_state_floats() const { return inner() * state_size; }
};

// Qwen3-Next's Gated DeltaNet layers (its config's linear_* keys). Value head h reads key head
// h / (num_value_heads / num_key_heads).
struct LinearAttentionConfig {
  std::int32_t num_key_heads = 0;
  std::int32_t num_value_heads = 0;
  std::int32_t key_head_dim = 0;
  std::int32_t value_head_dim = 0;
  std::int32_t conv_kernel = 0;  // taps of the causal convolution over q, k and v

  std::int64_t key_dim() const { return static_cast<std::int64_t>(num_key_heads) * key_head_dim; }
  std::int64_t value_dim() const { return static_cast<std::int64_t>(num_value_heads) * value_head_dim; }
  std::int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }
  // The input projection's width: q, k, v, the output gate z, then b and a (one per value head).
  std::int64_t projection_width() const { return 2 * key_dim() + 2 * value_dim() + 2LL * num_value_heads; }
  // Floats of one request's state in one layer: the last conv_kernel - 1 conv inputs, then every
  // value head's [key_head_dim, value_head_dim] matrix.
  std::int64_t conv_state_floats() const { return (conv_kernel - 1) * conv_channels(); }
  std::int64_t recurrent_state_floats() const {
    return static_cast<std::int64_t>(num_value_heads) * key_head_dim * value_head_dim;
  }
};

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture_name;  // as in config.json, e.g. "LlamaForCausalLM"
  Architecture architecture = Architecture::kLlama;
  std::int32_t hidden_size = 0;
  std::int32_t intermediate_size = 0;
  std::int32_t num_layers = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t vocab_size = 0;
  std::int32_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections have biases (Qwen2 always; attention_bias elsewhere)
  bool o_bias = false;    // o_proj has a bias (attention_bias on Llama/Qwen3)
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3)
  // Dims of each head that RoPE rotates (the first rotary_dim; head_dim unless the config's
  // partial_rotary_factor is below 1).
  std::int32_t rotary_dim = 0;
  // Gated attention (Qwen3-Next): q_proj also yields a per-head gate; the attention output is
  // multiplied by sigmoid(gate) before o_proj.
  bool attn_output_gate = false;
  // RMSNorm weights are stored centred on zero: the norm multiplies by (1 + w). The loader adds
  // the 1 (in F32, as the reference does), so the forward pass sees ordinary weights.
  bool zero_centered_norms = false;
  std::vector<MixerKind> mixers;  // per layer
  // Per layer: whether the layer ends with an MLP (experts or dense). Every layer does but in
  // Nemotron-H, whose blocks hold one sublayer: a mixer (false) or the MLP alone (kNone, true). A
  // one-sublayer layer has no post-attention norm.
  std::vector<bool> has_mlp;
  MlpActivation mlp_activation = MlpActivation::kSiluGated;
  // Attention applies RoPE (false: no positional encoding in attention, Nemotron-H).
  bool rope = true;
  LinearAttentionConfig linear_attention;  // when some layer's mixer is kLinearAttention
  Mamba2Config mamba2;                     // when some layer's mixer is kMamba2
  std::vector<std::int32_t> sliding_window;  // per layer; 0 = full attention
  // Mixture of experts (Qwen3-MoE). A sparse layer's MLP is num_experts experts of
  // moe_intermediate_size; each token goes to the num_experts_per_tok with the highest softmax of
  // the router's logits, weighted by those probabilities (renormalized to sum 1 when
  // norm_topk_prob). Dense layers keep the intermediate_size MLP.
  std::int32_t num_experts = 0;  // 0: every MLP is dense
  std::int32_t num_experts_per_tok = 0;
  std::int32_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  // Qwen2-MoE's shared expert: an MLP every token goes through, its output scaled by
  // sigmoid(shared_expert_gate(x)) and added to the experts'. 0: none.
  std::int32_t shared_expert_intermediate_size = 0;
  std::vector<bool> sparse_mlp;  // per layer: experts (true) or the dense MLP
  // Where the decoder's tensors sit in the checkpoint ("model." — "model.language_model." for a
  // multimodal checkpoint's text model, "backbone." for Nemotron-H, which names them its own way).
  std::string weights_prefix = "model.";
  std::optional<DType> torch_dtype;
  std::optional<std::int32_t> bos_token_id;
  std::vector<std::int32_t> eos_token_ids;  // config.json and generation_config.json together
  // Recurrent-state layers (Mamba, linear attention): the P/D rule makes prefill and decode use
  // the same num_speculative_tokens for such models. Derived from config.json (see
  // has_recurrent_layers_in), so that it holds for architectures Baton cannot load as well.
  bool has_recurrent_layers = false;
  // xxh3-64 of config.json's canonical serialization: which model this is, for the KV layout
  // fingerprint that two engines compare before KV moves between them.
  std::uint64_t identity = 0;

  // Reads dir/config.json and, when present, dir/generation_config.json.
  static absl::StatusOr<ModelConfig> load(const std::string& model_dir);
  // `where` prefixes error messages (normally the file path).
  static absl::StatusOr<ModelConfig> parse(const nlohmann::json& config, const nlohmann::json* generation_config,
                                           const std::string& where);

  std::int32_t q_size() const { return num_heads * head_dim; }
  bool has_experts() const { return num_experts > 0; }
  std::int32_t kv_size() const { return num_kv_heads * head_dim; }
  MixerKind mixer(std::int32_t layer) const {
    return static_cast<std::size_t>(layer) < mixers.size() ? mixers[static_cast<std::size_t>(layer)]
                                                            : MixerKind::kAttention;
  }
  bool is_linear_attention(std::int32_t layer) const { return mixer(layer) == MixerKind::kLinearAttention; }
  bool is_attention(std::int32_t layer) const { return mixer(layer) == MixerKind::kAttention; }
  // A layer with a recurrent state (Gated DeltaNet or Mamba-2).
  bool is_recurrent(std::int32_t layer) const {
    return mixer(layer) == MixerKind::kLinearAttention || mixer(layer) == MixerKind::kMamba2;
  }
  bool layer_has_mlp(std::int32_t layer) const {
    return static_cast<std::size_t>(layer) >= has_mlp.size() || has_mlp[static_cast<std::size_t>(layer)];
  }
  std::int32_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  std::int32_t num_attention_layers() const;  // layers with a KV cache
  std::int32_t num_recurrent_layers() const;  // layers with a recurrent state
  bool has_mamba2_layers() const;
  // Floats of one request's state in one recurrent layer (every recurrent layer of a model is of
  // one kind): the convolution's history, then the recurrence's state.
  std::int64_t conv_state_floats() const;
  std::int64_t recurrent_state_floats() const;
  std::int64_t num_parameters() const;  // weights the forward pass reads (embeddings counted once)
  // The weights one token computes with: num_parameters() but, in a layer with experts, only
  // num_experts_per_tok of them (with the router and any shared expert). Dense models: the same.
  std::int64_t num_active_parameters() const;
};

// Whether a config.json describes a hybrid model with recurrent layers: `layer_types` naming
// linear-attention / Mamba / recurrent layers (Qwen3-Next, MiniMax, Jamba-style configs),
// `layers_block_type` (Jamba) or `hybrid_override_pattern` (Nemotron-H) with Mamba layers, or an
// architecture of a recurrent family (Mamba, Jamba, Zamba, Falcon-H1, RecurrentGemma, Qwen3-Next).
bool has_recurrent_layers_in(const nlohmann::json& config);

}  // namespace baton
