#include "kernels/cuda/recurrent_ops.h"

#include "common/status.h"
#include "kernels/cuda/recurrent.cuh"
#include "kernels/cuda/tensor_args.h"

namespace baton::cuda_ops {
namespace {

static_assert(cuda::kMaxConvHistory + 1 == kMaxRecurrentConvKernel && cuda::kMaxStateColumn == kMaxRecurrentStateColumn &&
                  cuda::kMaxStateThreads == kMaxRecurrentHeadWidth,
              "recurrent.cuh's per-thread arrays must hold what kernels/backend.h promises");

cuda::StateArg state_arg(const TensorView& state, std::int64_t floats, const char* what) {
  BATON_CHECK(state.dtype == DType::kF32 && state.ndim == 3 && state.stride(2) == 1 && state.dim(2) == floats, what,
              " state must be F32 [groups, slots, ", floats, "] with contiguous floats: ", state.describe());
  return cuda::StateArg{state.ptr<float>(), state.dim(0), state.dim(1), state.dim(2), state.stride(0), state.stride(1)};
}

cuda::SeqsArg seqs_arg(const RecurrentBatch& batch, const TensorView& state) {
  BATON_CHECK(batch.seqs.dtype == DType::kI32 && batch.seqs.ndim == 2 && batch.seqs.dim(1) == 4 &&
                  batch.seqs.is_contiguous() && batch.slots >= 1 && state.dim(1) == batch.slots,
              "recurrent batch: ", batch.seqs.describe(), ", ", batch.slots, " slots for state ", state.describe());
  return cuda::SeqsArg{batch.seqs.ptr<std::int32_t>(), batch.seqs.dim(0), batch.slots};
}

bool same_rows(const cuda::RowsArg& a, const cuda::RowsArg& b) { return a.count == b.count && a.cols == b.cols; }

}  // namespace

void sigmoid_mul(cudaStream_t stream, const TensorView& x, const TensorView& gate, const TensorView& out) {
  for (const TensorView* t : {&x, &gate, &out}) check_f32(*t, "sigmoid_mul operand");
  const cuda::RowsArg xr = rows(x), gr = rows(gate), o = rows(out);
  BATON_CHECK(same_rows(xr, o) && same_rows(gr, o), "sigmoid_mul shapes: ", x.describe(), " * sigmoid(",
              gate.describe(), ") -> ", out.describe());
  check_cuda(cuda::sigmoid_mul(xr, gr, o, stream), "sigmoid_mul");
}

void relu_squared(cudaStream_t stream, const TensorView& x, const TensorView& out) {
  check_f32(x, "relu_squared input");
  check_f32(out, "relu_squared output");
  const cuda::RowsArg xr = rows(x), o = rows(out);
  BATON_CHECK(same_rows(xr, o), "relu_squared shapes: ", x.describe(), " -> ", out.describe());
  check_cuda(cuda::relu_squared(xr, o, stream), "relu_squared");
}

void gated_rms_norm(cudaStream_t stream, const TensorView& x, const TensorView& gate, const TensorView& weight,
                    float eps, const TensorView& out) {
  for (const TensorView* t : {&x, &gate, &weight, &out}) check_f32(*t, "gated_rms_norm operand");
  const cuda::RowsArg xr = rows(x), gr = rows(gate), o = rows(out);
  BATON_CHECK(same_rows(xr, o) && same_rows(gr, o) && weight.numel() == o.cols, "gated_rms_norm shapes: x ",
              x.describe(), ", gate ", gate.describe(), ", weight ", weight.describe(), ", out ", out.describe());
  check_cuda(cuda::gated_rms_norm(xr, gr, weight.ptr<float>(), eps, o, stream), "gated_rms_norm");
}

void gated_group_rms_norm(cudaStream_t stream, const TensorView& x, const TensorView& gate, const TensorView& weight,
                          std::int64_t group_size, float eps, const TensorView& out) {
  for (const TensorView* t : {&x, &gate, &weight, &out}) check_f32(*t, "gated_group_rms_norm operand");
  const cuda::RowsArg xr = rows(x), gr = rows(gate), o = rows(out);
  BATON_CHECK(same_rows(xr, o) && same_rows(gr, o) && weight.numel() == o.cols && group_size > 0 &&
                  o.cols % group_size == 0,
              "gated_group_rms_norm shapes: x ", x.describe(), ", gate ", gate.describe(), ", weight ",
              weight.describe(), ", group ", group_size, ", out ", out.describe());
  check_cuda(cuda::gated_group_rms_norm(xr, gr, weight.ptr<float>(), group_size, eps, o, stream),
             "gated_group_rms_norm");
}

void causal_conv1d(cudaStream_t stream, const TensorView& x, const TensorView& weight, const TensorView& bias,
                   const TensorView& state, const RecurrentBatch& batch, const TensorView& out) {
  check_f32(x, "causal_conv1d input");
  check_f32(out, "causal_conv1d output");
  check_f32(weight, "causal_conv1d weight");
  const cuda::RowsArg xr = rows(x), o = rows(out);
  const std::int64_t channels = xr.cols, taps = weight.ndim == 2 ? weight.dim(1) : 0;
  BATON_CHECK(x.ndim == 2 && same_rows(xr, o) && weight.dim(0) == channels && weight.is_contiguous() && taps >= 1 &&
                  taps - 1 <= cuda::kMaxConvHistory && (bias.empty() || (bias.dtype == DType::kF32 && bias.numel() == channels)),
              "causal_conv1d shapes: x ", x.describe(), ", weight ", weight.describe(), ", bias ", bias.describe(),
              ", out ", out.describe(), " (at most ", cuda::kMaxConvHistory + 1, " taps)");
  const cuda::StateArg st = state_arg(state, (taps - 1) * channels, "causal_conv1d");
  check_cuda(cuda::causal_conv1d(xr, weight.ptr<float>(), bias.empty() ? nullptr : bias.ptr<float>(),
                                 static_cast<int>(taps), st, seqs_arg(batch, state), o, stream),
             "causal_conv1d");
}

void gated_delta_rule(cudaStream_t stream, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& b, const TensorView& a, const TensorView& a_log, const TensorView& dt_bias,
                      const TensorView& state, const RecurrentBatch& batch, const TensorView& out) {
  cuda::DeltaRuleArgs args;
  args.q = heads(q, "gated_delta_rule q");
  args.k = heads(k, "gated_delta_rule k");
  args.v = heads(v, "gated_delta_rule v");
  args.out = heads(out, "gated_delta_rule out");
  check_f32(b, "gated_delta_rule b");
  check_f32(a, "gated_delta_rule a");
  check_f32(a_log, "gated_delta_rule a_log");
  check_f32(dt_bias, "gated_delta_rule dt_bias");
  args.b = rows(b);
  args.a = rows(a);
  const std::int64_t tokens = args.q.tokens, v_heads = args.v.heads, dk = args.q.head_dim, dv = args.v.head_dim;
  BATON_CHECK(args.k.tokens == tokens && args.k.heads == args.q.heads && args.k.head_dim == dk &&
                  args.v.tokens == tokens && v_heads % args.q.heads == 0 && args.out.tokens == tokens &&
                  args.out.heads == v_heads && args.out.head_dim == dv && args.b.count == tokens &&
                  args.b.cols == v_heads && args.a.count == tokens && args.a.cols == v_heads &&
                  a_log.numel() == v_heads && dt_bias.numel() == v_heads && dk <= cuda::kMaxStateColumn &&
                  dv <= cuda::kMaxStateThreads,
              "gated_delta_rule shapes: q ", q.describe(), ", k ", k.describe(), ", v ", v.describe(), ", b ",
              b.describe(), ", out ", out.describe(), " (key_dim at most ", cuda::kMaxStateColumn, ", value_dim at most ",
              cuda::kMaxStateThreads, ")");
  args.a_log = a_log.ptr<float>();
  args.dt_bias = dt_bias.ptr<float>();
  const cuda::StateArg st = state_arg(state, v_heads * dk * dv, "gated_delta_rule");
  check_cuda(cuda::gated_delta_rule(args, st, seqs_arg(batch, state), stream), "gated_delta_rule");
}

void ssd_recurrence(cudaStream_t stream, const TensorView& x, const TensorView& dt_in, const TensorView& b,
                    const TensorView& c, const TensorView& a_log, const TensorView& dt_bias, const TensorView& d,
                    float dt_min, float dt_max, const TensorView& state, const RecurrentBatch& batch,
                    const TensorView& out) {
  cuda::SsdArgs args;
  args.x = heads(x, "ssd_recurrence x");
  args.b = heads(b, "ssd_recurrence b");
  args.c = heads(c, "ssd_recurrence c");
  args.out = heads(out, "ssd_recurrence out");
  for (const TensorView* t : {&dt_in, &a_log, &dt_bias, &d}) check_f32(*t, "ssd_recurrence operand");
  args.dt = rows(dt_in);
  const std::int64_t tokens = args.x.tokens, hs = args.x.heads, groups = args.b.heads, n = args.b.head_dim;
  BATON_CHECK(groups > 0 && hs % groups == 0 && args.b.tokens == tokens && args.c.tokens == tokens &&
                  args.c.heads == groups && args.c.head_dim == n && args.out.tokens == tokens && args.out.heads == hs &&
                  args.out.head_dim == args.x.head_dim && args.dt.count == tokens && args.dt.cols == hs &&
                  a_log.numel() == hs && dt_bias.numel() == hs && d.numel() == hs && n <= cuda::kMaxStateColumn &&
                  args.x.head_dim <= cuda::kMaxStateThreads && !(dt_max < dt_min),
              "ssd_recurrence shapes: x ", x.describe(), ", dt ", dt_in.describe(), ", b ", b.describe(), ", c ",
              c.describe(), ", out ", out.describe(), " (state_size at most ", cuda::kMaxStateColumn,
              ", head_dim at most ", cuda::kMaxStateThreads, ")");
  args.a_log = a_log.ptr<float>();
  args.dt_bias = dt_bias.ptr<float>();
  args.d = d.ptr<float>();
  args.dt_min = dt_min;
  args.dt_max = dt_max;
  const cuda::StateArg st = state_arg(state, hs * args.x.head_dim * n, "ssd_recurrence");
  check_cuda(cuda::ssd_recurrence(args, st, seqs_arg(batch, state), stream), "ssd_recurrence");
}

}  // namespace baton::cuda_ops
