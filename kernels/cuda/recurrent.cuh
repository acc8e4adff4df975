// The recurrent layers' CUDA ops (Qwen3-Next's and Qwen3.5's Gated DeltaNet, Nemotron-H's Mamba-2)
// and their elementwise companions: sigmoid_mul, relu_squared, gated_rms_norm,
// gated_group_rms_norm, causal_conv1d, gated_delta_rule and ssd_recurrence. Semantics are the CPU
// twins' (kernels/cpu/linear_attention.cc, kernels/cpu/mamba2.cc; kernels/backend.h documents
// them).
//
// The recurrences run token by token, each (sequence, head) in one thread block and each column
// (DeltaNet) or row (Mamba-2) of a head's state in one thread, in a fixed order: a token's output
// and state do not depend on the batch or on how the sequence's tokens were split into steps.
// Each thread reads only its own column or row of the starting slot before it writes any slot,
// so a step may write the slot it started from.
#pragma once

#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

// Largest sizes the per-thread state arrays hold (CudaBackend checks them before launching).
inline constexpr int kMaxConvHistory = 16;   // conv_kernel - 1
inline constexpr int kMaxStateColumn = 256;  // DeltaNet key_head_dim, Mamba-2 state_size
inline constexpr int kMaxStateThreads = 1024;  // DeltaNet value_head_dim, Mamba-2 head_dim

// A recurrent state view [groups, slots, floats] F32, floats contiguous.
struct StateArg {
  float* data = nullptr;
  std::int64_t groups = 0;
  std::int64_t slots = 0;
  std::int64_t floats = 0;
  std::int64_t stride0 = 0;  // between groups
  std::int64_t stride1 = 0;  // between slots
};

// RecurrentBatch on the device: [num_seqs, 4] I32 (first row, tokens, group, slot_in), `slots`
// states kept per group.
struct SeqsArg {
  const std::int32_t* data = nullptr;
  std::int64_t num_seqs = 0;
  std::int64_t slots = 1;
};

// out = x * sigmoid(gate); out may alias x.
cudaError_t sigmoid_mul(RowsArg x, RowsArg gate, RowsArg out, cudaStream_t stream);
// out = relu(x)²; out may alias x.
cudaError_t relu_squared(RowsArg x, RowsArg out, cudaStream_t stream);
// out = x / sqrt(mean(x²) + eps) * weight * silu(gate), per row; out may alias x.
cudaError_t gated_rms_norm(RowsArg x, RowsArg gate, const float* weight, float eps, RowsArg out, cudaStream_t stream);
// u = x * silu(gate); out = u / sqrt(mean over each group of group_size columns of u² + eps) * weight.
cudaError_t gated_group_rms_norm(RowsArg x, RowsArg gate, const float* weight, std::int64_t group_size, float eps,
                                 RowsArg out, cudaStream_t stream);
// Depthwise causal convolution (taps per channel, weight [channels, taps], bias or null) then SiLU.
cudaError_t causal_conv1d(RowsArg x, const float* weight, const float* bias, int taps, StateArg state, SeqsArg seqs,
                          RowsArg out, cudaStream_t stream);

// The gated delta rule's operands: q, k [tokens, k_heads, dk]; v, out [tokens, v_heads, dv];
// b, a [tokens, v_heads] as rows; a_log, dt_bias [v_heads].
struct DeltaRuleArgs {
  HeadsArg q, k, v, out;
  RowsArg b, a;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
};
cudaError_t gated_delta_rule(const DeltaRuleArgs& args, StateArg state, SeqsArg seqs, cudaStream_t stream);

// Mamba-2's operands: x, out [tokens, heads, head_dim]; b, c [tokens, groups, state];
// dt [tokens, heads] as rows; a_log, dt_bias, d [heads].
struct SsdArgs {
  HeadsArg x, b, c, out;
  RowsArg dt;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  const float* d = nullptr;
  float dt_min = 0.0f, dt_max = 0.0f;
};
cudaError_t ssd_recurrence(const SsdArgs& args, StateArg state, SeqsArg seqs, cudaStream_t stream);

}  // namespace baton::cuda
