// CpuBackend's linear-attention ops (Qwen3-Next's Gated DeltaNet layers and gated attention):
// sigmoid_mul, causal_conv1d, gated_delta_rule and gated_rms_norm.
//
// The recurrent ops walk each sequence token by token (the recurrent form, never a chunked
// parallel form), so a token's output and the state after it are bit-identical whether it came
// in a prefill chunk, a decode step or a verification step, and whatever else is in the batch:
// speculative decoding stays token-identical, and a verification step can keep the state after
// any draft. Work is split over (sequence, channel block) and (sequence, value head) pairs, each
// computed in a fixed order, so the thread count changes nothing. Plain loops, one code path on
// every ISA tier (-ffp-contract=off): a tier changes nothing either.
//
// Must not: keep a sequence's state anywhere but its slots (the state memory is the engine's),
// or read a slot it did not name.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/recurrent_seqs.h"
#include "kernels/cpu/rows.h"
#include "kernels/step_profile.h"

namespace baton::cpu {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with its default threshold: x itself above 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

void CpuBackend::sigmoid_mul(const TensorView& x, const TensorView& gate, const TensorView& out) {
  if (recorded([=, this] { sigmoid_mul(x, gate, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  const Rows<const float> xr(x), gr(gate);
  const Rows<float> o(out);
  BATON_CHECK(x.dtype == DType::kF32 && gate.dtype == DType::kF32 && out.dtype == DType::kF32 &&
                  xr.count() == o.count() && gr.count() == o.count() && xr.cols() == o.cols() && gr.cols() == o.cols(),
              "sigmoid_mul shapes: ", x.describe(), " * sigmoid(", gate.describe(), ") -> ", out.describe());
  pool_.parallel_for(o.count(), min_rows_per_thread(o.cols()), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* a = xr.row(r);
      const float* g = gr.row(r);
      float* z = o.row(r);
      for (std::int64_t i = 0; i < o.cols(); ++i) z[i] = a[i] * sigmoid(g[i]);
    }
  });
}

void CpuBackend::causal_conv1d(const TensorView& x, const TensorView& weight, const TensorView& bias,
                               const TensorView& state, const RecurrentBatch& batch, const TensorView& out) {
  if (recorded([=, this] { causal_conv1d(x, weight, bias, state, batch, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  const Rows<const float> in(x);
  const Rows<float> o(out);
  const std::int64_t channels = in.cols(), taps = weight.ndim == 2 ? weight.dim(1) : 0, history = taps - 1;
  BATON_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32 && weight.dtype == DType::kF32 && x.ndim == 2 &&
                  taps >= 1 && weight.dim(0) == channels && weight.stride(0) == taps && o.cols() == channels &&
                  o.count() == in.count() && state.dim(2) == history * channels &&
                  (bias.empty() || (bias.dtype == DType::kF32 && bias.numel() == channels)),
              "causal_conv1d shapes: x ", x.describe(), ", weight ", weight.describe(), ", bias ", bias.describe(),
              ", state ", state.describe(), ", out ", out.describe());
  const float* bias_p = bias.empty() ? nullptr : bias.ptr<const float>();
  const std::vector<RecurrentSeq> seqs = read_batch(batch, state, in.count());
  constexpr std::int64_t kBlock = 256;  // channels per task
  const std::int64_t blocks = (channels + kBlock - 1) / kBlock;
  const auto* w = weight.ptr<const float>();
  pool_.parallel_for(static_cast<std::int64_t>(seqs.size()) * blocks, 1, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> start(static_cast<std::size_t>(history * kBlock));  // inputs before the first token
    for (std::int64_t task = begin; task < end; ++task) {
      const RecurrentSeq& s = seqs[static_cast<std::size_t>(task / blocks)];
      const std::int64_t c0 = (task % blocks) * kBlock, c1 = std::min(channels, c0 + kBlock), width = c1 - c0;
      if (s.tokens == 0) continue;
      for (std::int64_t u = 0; u < history; ++u) {
        float* dst = start.data() + u * kBlock;
        load_start_state(s, state, u * channels + c0, width, dst);
      }
      // Input u of the sequence (u < 0: from its starting state), channels c0.. of the block.
      const auto input = [&](std::int64_t u) -> const float* {
        return u >= 0 ? in.row(s.first_row + u) + c0 : start.data() + (history + u) * kBlock;
      };
      for (std::int64_t t = 0; t < s.tokens; ++t) {
        float* dst = o.row(s.first_row + t) + c0;
        for (std::int64_t c = 0; c < width; ++c) {
          const float* wc = w + (c0 + c) * taps;
          float acc = bias_p != nullptr ? bias_p[c0 + c] : 0.0f;
          for (std::int64_t j = 0; j < taps; ++j) acc += wc[j] * input(t - history + j)[c];
          dst[c] = silu(acc);
        }
      }
      if (s.group < 0) continue;
      for (std::int64_t t = s.first_kept; t < s.tokens; ++t) {
        float* slot = slot_ptr(state, s.group, t - s.first_kept);
        for (std::int64_t u = 0; u < history; ++u) {
          std::memcpy(slot + u * channels + c0, input(t - history + 1 + u), static_cast<std::size_t>(width) * sizeof(float));
        }
      }
    }
  });
}

void CpuBackend::gated_delta_rule(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& b,
                                  const TensorView& a, const TensorView& a_log, const TensorView& dt_bias,
                                  const TensorView& state, const RecurrentBatch& batch, const TensorView& out) {
  if (recorded([=, this] { gated_delta_rule(q, k, v, b, a, a_log, dt_bias, state, batch, out); })) return;
  const ProfileScope profile(ProfileClass::kAttention);
  const std::int64_t tokens = q.ndim == 3 ? q.dim(0) : 0;
  const std::int64_t k_heads = q.dim(1), dk = q.dim(2), v_heads = v.ndim == 3 ? v.dim(1) : 0, dv = v.dim(2);
  for (const TensorView* t : {&q, &k, &v, &b, &a, &a_log, &dt_bias, &out}) {
    BATON_CHECK(t->dtype == DType::kF32 && t->stride(t->ndim - 1) == 1, "gated_delta_rule operand ", t->describe());
  }
  BATON_CHECK(q.ndim == 3 && k.ndim == 3 && v.ndim == 3 && out.ndim == 3 && b.ndim == 2 && a.ndim == 2 &&
                  k.dim(0) == tokens && k.dim(1) == k_heads && k.dim(2) == dk && v.dim(0) == tokens &&
                  v_heads % k_heads == 0 && b.dim(0) == tokens && b.dim(1) == v_heads && a.dim(0) == tokens &&
                  a.dim(1) == v_heads && a_log.numel() == v_heads && dt_bias.numel() == v_heads &&
                  out.dim(0) == tokens && out.dim(1) == v_heads && out.dim(2) == dv &&
                  state.dim(2) == v_heads * dk * dv,
              "gated_delta_rule shapes: q ", q.describe(), ", k ", k.describe(), ", v ", v.describe(), ", b ",
              b.describe(), ", state ", state.describe(), ", out ", out.describe());
  const std::vector<RecurrentSeq> seqs = read_batch(batch, state, tokens);
  const std::int64_t group = v_heads / k_heads, head_state = dk * dv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const auto* a_log_p = a_log.ptr<const float>();
  const auto* dt_bias_p = dt_bias.ptr<const float>();
  const std::int64_t work = dk * dv * 4;
  pool_.parallel_for(static_cast<std::int64_t>(seqs.size()) * v_heads, std::max<std::int64_t>(1, (1 << 15) / work), 1,
                     [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> s_mat(static_cast<std::size_t>(head_state)), qn(static_cast<std::size_t>(dk)),
        kn(static_cast<std::size_t>(dk)), mem(static_cast<std::size_t>(dv)), delta(static_cast<std::size_t>(dv));
    for (std::int64_t task = begin; task < end; ++task) {
      const RecurrentSeq& s = seqs[static_cast<std::size_t>(task / v_heads)];
      const std::int64_t h = task % v_heads, hk = h / group;
      if (s.tokens == 0) continue;
      load_start_state(s, state, h * head_state, head_state, s_mat.data());
      const float decay_rate = -std::exp(a_log_p[h]);
      for (std::int64_t t = 0; t < s.tokens; ++t) {
        const std::int64_t row = s.first_row + t;
        const float* qr = q.ptr<const float>() + row * q.stride(0) + hk * q.stride(1);
        const float* kr = k.ptr<const float>() + row * k.stride(0) + hk * k.stride(1);
        const float* vr = v.ptr<const float>() + row * v.stride(0) + h * v.stride(1);
        float q_sq = 0.0f, k_sq = 0.0f;
        for (std::int64_t i = 0; i < dk; ++i) {
          q_sq += qr[i] * qr[i];
          k_sq += kr[i] * kr[i];
        }
        const float q_inv = 1.0f / std::sqrt(q_sq + 1e-6f), k_inv = 1.0f / std::sqrt(k_sq + 1e-6f);
        for (std::int64_t i = 0; i < dk; ++i) {
          qn[static_cast<std::size_t>(i)] = qr[i] * q_inv * scale;
          kn[static_cast<std::size_t>(i)] = kr[i] * k_inv;
        }
        const float beta = sigmoid(b.ptr<const float>()[row * b.stride(0) + h]);
        const float decay = std::exp(decay_rate * softplus(a.ptr<const float>()[row * a.stride(0) + h] + dt_bias_p[h]));
        // S = decay * S, and k^T S (what the state recalls for this key).
        std::fill(mem.begin(), mem.end(), 0.0f);
        for (std::int64_t i = 0; i < dk; ++i) {
          float* si = s_mat.data() + i * dv;
          const float ki = kn[static_cast<std::size_t>(i)];
          for (std::int64_t j = 0; j < dv; ++j) {
            si[j] *= decay;
            mem[static_cast<std::size_t>(j)] += ki * si[j];
          }
        }
        for (std::int64_t j = 0; j < dv; ++j) {
          delta[static_cast<std::size_t>(j)] = (vr[j] - mem[static_cast<std::size_t>(j)]) * beta;
        }
        // S += k delta^T, and the output q^T S.
        float* o = out.ptr<float>() + row * out.stride(0) + h * out.stride(1);
        std::fill_n(o, dv, 0.0f);
        for (std::int64_t i = 0; i < dk; ++i) {
          float* si = s_mat.data() + i * dv;
          const float ki = kn[static_cast<std::size_t>(i)], qi = qn[static_cast<std::size_t>(i)];
          for (std::int64_t j = 0; j < dv; ++j) {
            si[j] += ki * delta[static_cast<std::size_t>(j)];
            o[j] += qi * si[j];
          }
        }
        store_state_after(s, t, state, h * head_state, head_state, s_mat.data());
      }
    }
  });
}

void CpuBackend::gated_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight, float eps,
                                const TensorView& out) {
  if (recorded([=, this] { gated_rms_norm(x, gate, weight, eps, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  const Rows<const float> xr(x), gr(gate);
  const Rows<float> o(out);
  const std::int64_t dim = o.cols();
  BATON_CHECK(x.dtype == DType::kF32 && gate.dtype == DType::kF32 && out.dtype == DType::kF32 &&
                  weight.dtype == DType::kF32 && weight.numel() == dim && xr.count() == o.count() &&
                  gr.count() == o.count() && xr.cols() == dim && gr.cols() == dim,
              "gated_rms_norm shapes: x ", x.describe(), ", gate ", gate.describe(), ", weight ", weight.describe(),
              ", out ", out.describe());
  const auto* w = weight.ptr<const float>();
  pool_.parallel_for(o.count(), min_rows_per_thread(dim), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* xi = xr.row(r);
      const float* gi = gr.row(r);
      float* z = o.row(r);
      float sq = 0.0f;
      for (std::int64_t i = 0; i < dim; ++i) sq += xi[i] * xi[i];
      const float inv = 1.0f / std::sqrt(sq / static_cast<float>(dim) + eps);
      for (std::int64_t i = 0; i < dim; ++i) z[i] = xi[i] * inv * w[i] * silu(gi[i]);
    }
  });
}

}  // namespace baton::cpu
