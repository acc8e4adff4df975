// CpuBackend's Mamba-2 ops (Nemotron-H): ssd_recurrence, gated_group_rms_norm and relu_squared
// (its MLP's activation). The convolution before the recurrence is causal_conv1d
// (linear_attention.cc), with the conv bias.
//
// ssd_recurrence walks each sequence token by token (the recurrent form of the SSD, never the
// chunked matrix form), so a token's output and the state after it are bit-identical whether it
// came in a prefill chunk, a decode step or a verification step, and whatever else is in the
// batch. Work is split over (sequence, head) pairs, each computed in a fixed order: the thread
// count changes nothing. Plain loops, one code path on every ISA tier (-ffp-contract=off).
//
// Must not: keep a sequence's state anywhere but its slots, or read a slot it did not name.
#include <algorithm>
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

float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with its default threshold: x itself above 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

void CpuBackend::relu_squared(const TensorView& x, const TensorView& out) {
  if (recorded([=, this] { relu_squared(x, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  const Rows<const float> xr(x);
  const Rows<float> o(out);
  BATON_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32 && xr.count() == o.count() && xr.cols() == o.cols(),
              "relu_squared shapes: ", x.describe(), " -> ", out.describe());
  pool_.parallel_for(o.count(), min_rows_per_thread(o.cols()), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* a = xr.row(r);
      float* z = o.row(r);
      for (std::int64_t i = 0; i < o.cols(); ++i) {
        const float v = a[i] > 0.0f ? a[i] : 0.0f;
        z[i] = v * v;
      }
    }
  });
}

void CpuBackend::ssd_recurrence(const TensorView& x, const TensorView& dt_in, const TensorView& b, const TensorView& c,
                                const TensorView& a_log, const TensorView& dt_bias, const TensorView& d, float dt_min,
                                float dt_max, const TensorView& state, const RecurrentBatch& batch,
                                const TensorView& out) {
  if (recorded([=, this] { ssd_recurrence(x, dt_in, b, c, a_log, dt_bias, d, dt_min, dt_max, state, batch, out); })) {
    return;
  }
  const ProfileScope profile(ProfileClass::kAttention);
  const std::int64_t tokens = x.ndim == 3 ? x.dim(0) : 0;
  const std::int64_t heads = x.ndim == 3 ? x.dim(1) : 0, head_dim = x.ndim == 3 ? x.dim(2) : 0;
  const std::int64_t groups = b.ndim == 3 ? b.dim(1) : 0, n = b.ndim == 3 ? b.dim(2) : 0;
  for (const TensorView* t : {&x, &dt_in, &b, &c, &a_log, &dt_bias, &d, &out}) {
    BATON_CHECK(t->dtype == DType::kF32 && t->ndim >= 1 && t->stride(t->ndim - 1) == 1, "ssd_recurrence operand ",
                t->describe());
  }
  BATON_CHECK(x.ndim == 3 && b.ndim == 3 && c.ndim == 3 && out.ndim == 3 && dt_in.ndim == 2 && groups > 0 &&
                  heads % groups == 0 && b.dim(0) == tokens && c.dim(0) == tokens && c.dim(1) == groups &&
                  c.dim(2) == n && dt_in.dim(0) == tokens && dt_in.dim(1) == heads && a_log.numel() == heads &&
                  dt_bias.numel() == heads && d.numel() == heads && out.dim(0) == tokens && out.dim(1) == heads &&
                  out.dim(2) == head_dim && state.ndim == 3 && state.dim(2) == heads * head_dim * n &&
                  !(dt_max < dt_min),
              "ssd_recurrence shapes: x ", x.describe(), ", dt ", dt_in.describe(), ", b ", b.describe(), ", c ",
              c.describe(), ", state ", state.describe(), ", out ", out.describe(), ", dt limits [", dt_min, ", ",
              dt_max, "]");
  const std::vector<RecurrentSeq> seqs = read_batch(batch, state, tokens);
  const std::int64_t heads_per_group = heads / groups, head_state = head_dim * n;
  const auto* a_log_p = a_log.ptr<const float>();
  const auto* dt_bias_p = dt_bias.ptr<const float>();
  const auto* d_p = d.ptr<const float>();
  pool_.parallel_for(static_cast<std::int64_t>(seqs.size()) * heads,
                     std::max<std::int64_t>(1, (1 << 15) / std::max<std::int64_t>(1, head_state * 3)), 1,
                     [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> s_mat(static_cast<std::size_t>(head_state));
    for (std::int64_t task = begin; task < end; ++task) {
      const RecurrentSeq& s = seqs[static_cast<std::size_t>(task / heads)];
      const std::int64_t h = task % heads, g = h / heads_per_group;
      if (s.tokens == 0) continue;
      load_start_state(s, state, h * head_state, head_state, s_mat.data());
      const float a = -std::exp(a_log_p[h]);
      for (std::int64_t t = 0; t < s.tokens; ++t) {
        const std::int64_t row = s.first_row + t;
        const float* xr = x.ptr<const float>() + row * x.stride(0) + h * x.stride(1);
        const float* br = b.ptr<const float>() + row * b.stride(0) + g * b.stride(1);
        const float* cr = c.ptr<const float>() + row * c.stride(0) + g * c.stride(1);
        const float dt = std::min(std::max(softplus(dt_in.ptr<const float>()[row * dt_in.stride(0) + h] + dt_bias_p[h]),
                                           dt_min), dt_max);
        const float decay = std::exp(dt * a);
        float* o = out.ptr<float>() + row * out.stride(0) + h * out.stride(1);
        for (std::int64_t p = 0; p < head_dim; ++p) {
          float* sp = s_mat.data() + p * n;
          const float dx = dt * xr[p];
          float y = 0.0f;
          for (std::int64_t j = 0; j < n; ++j) {
            sp[j] = sp[j] * decay + dx * br[j];
            y += sp[j] * cr[j];
          }
          o[p] = y + d_p[h] * xr[p];
        }
        store_state_after(s, t, state, h * head_state, head_state, s_mat.data());
      }
    }
  });
}

void CpuBackend::gated_group_rms_norm(const TensorView& x, const TensorView& gate, const TensorView& weight,
                                      std::int64_t group_size, float eps, const TensorView& out) {
  if (recorded([=, this] { gated_group_rms_norm(x, gate, weight, group_size, eps, out); })) return;
  const ProfileScope profile(ProfileClass::kNormRopeAct);
  const Rows<const float> xr(x), gr(gate);
  const Rows<float> o(out);
  const std::int64_t dim = o.cols();
  BATON_CHECK(x.dtype == DType::kF32 && gate.dtype == DType::kF32 && out.dtype == DType::kF32 &&
                  weight.dtype == DType::kF32 && weight.numel() == dim && xr.count() == o.count() &&
                  gr.count() == o.count() && xr.cols() == dim && gr.cols() == dim && group_size > 0 &&
                  dim % group_size == 0,
              "gated_group_rms_norm shapes: x ", x.describe(), ", gate ", gate.describe(), ", weight ",
              weight.describe(), ", group ", group_size, ", out ", out.describe());
  const auto* w = weight.ptr<const float>();
  pool_.parallel_for(o.count(), min_rows_per_thread(dim), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* xi = xr.row(r);
      const float* gi = gr.row(r);
      float* z = o.row(r);
      for (std::int64_t g0 = 0; g0 < dim; g0 += group_size) {
        float sq = 0.0f;
        for (std::int64_t i = g0; i < g0 + group_size; ++i) {
          z[i] = xi[i] * silu(gi[i]);
          sq += z[i] * z[i];
        }
        const float inv = 1.0f / std::sqrt(sq / static_cast<float>(group_size) + eps);
        for (std::int64_t i = g0; i < g0 + group_size; ++i) z[i] = z[i] * inv * w[i];
      }
    }
  });
}

}  // namespace baton::cpu
