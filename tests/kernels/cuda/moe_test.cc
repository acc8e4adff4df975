// The CUDA backend's mixture-of-experts layer against the CPU backend's (routing with ties,
// normalised and not, a shared expert, F32 and BF16 experts, decode- and prefill-sized batches),
// and its batch invariance: a token's output bits do not depend on the tokens beside it. Skipped
// without a GPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/dtype.h"
#include "tests/kernels/cuda/twin_test_util.h"

namespace baton {
namespace {

using cuda_testing::expect_close;
using cuda_testing::random_floats;
using cuda_testing::Twin;

struct MoeShape {
  std::int64_t experts, top_k, hidden, inter;
  bool normalize, shared;
  DType weight_dtype;
};

// Host weights in the weight dtype's bits, and views of them on each backend.
struct HostWeight {
  std::vector<float> f32;
  std::vector<std::uint16_t> bf16;
  std::int64_t rows, cols;
};

HostWeight host_weight(std::int64_t rows, std::int64_t cols, DType dt, std::uint32_t seed) {
  HostWeight w{random_floats(static_cast<std::size_t>(rows * cols), seed, 0.2f), {}, rows, cols};
  if (dt == DType::kBF16) {
    w.bf16.resize(w.f32.size());
    for (std::size_t i = 0; i < w.f32.size(); ++i) w.bf16[i] = f32_to_bf16(w.f32[i]);
  }
  return w;
}

TensorView on_cpu(HostWeight& w) {
  if (!w.bf16.empty()) return TensorView::contiguous(w.bf16.data(), DType::kBF16, {w.rows, w.cols});
  return TensorView::contiguous(w.f32.data(), DType::kF32, {w.rows, w.cols});
}

TensorView on_gpu(Twin& twin, const HostWeight& w) {
  if (!w.bf16.empty()) return twin.upload(w.bf16, DType::kBF16, {w.rows, w.cols});
  return twin.upload(w.f32, DType::kF32, {w.rows, w.cols});
}

// One layer's experts on both backends.
struct Layer {
  std::vector<HostWeight> weights;  // gate_up, down per expert, then shared gate_up, down, gate
  MoeExperts cpu, gpu;
};

Layer make_layer(Twin& twin, const MoeShape& s, std::uint32_t seed) {
  Layer l;
  const std::int64_t n = s.experts + (s.shared ? 1 : 0);
  for (std::int64_t e = 0; e < n; ++e) {
    l.weights.push_back(host_weight(2 * s.inter, s.hidden, s.weight_dtype, seed + 2 * static_cast<std::uint32_t>(e)));
    l.weights.push_back(host_weight(s.hidden, s.inter, s.weight_dtype, seed + 2 * static_cast<std::uint32_t>(e) + 1));
  }
  if (s.shared) l.weights.push_back(host_weight(1, s.hidden, DType::kF32, seed + 999));
  for (MoeExperts* m : {&l.cpu, &l.gpu}) {
    m->top_k = static_cast<std::int32_t>(s.top_k);
    m->normalize = s.normalize;
  }
  for (std::int64_t e = 0; e < s.experts; ++e) {
    const auto i = static_cast<std::size_t>(2 * e);
    l.cpu.gate_up.push_back(on_cpu(l.weights[i]));
    l.cpu.down.push_back(on_cpu(l.weights[i + 1]));
    l.gpu.gate_up.push_back(on_gpu(twin, l.weights[i]));
    l.gpu.down.push_back(on_gpu(twin, l.weights[i + 1]));
  }
  if (s.shared) {
    const auto i = static_cast<std::size_t>(2 * s.experts);
    l.cpu.shared_gate_up = on_cpu(l.weights[i]);
    l.cpu.shared_down = on_cpu(l.weights[i + 1]);
    l.cpu.shared_gate = on_cpu(l.weights[i + 2]);
    l.gpu.shared_gate_up = on_gpu(twin, l.weights[i]);
    l.gpu.shared_down = on_gpu(twin, l.weights[i + 1]);
    l.gpu.shared_gate = on_gpu(twin, l.weights[i + 2]);
  }
  return l;
}

// Scratch for `tokens` tokens: device views from the twin, or host vectors.
struct HostScratch {
  std::vector<float> rows, gate_up, act, out, shared_gate_up, shared_act, shared_out, shared_logit;
};

MoeScratch host_scratch(HostScratch& h, const MoeShape& s, std::int64_t tokens) {
  const std::int64_t pairs = tokens * s.top_k;
  auto view = [](std::vector<float>& v, std::int64_t r, std::int64_t c) {
    v.assign(static_cast<std::size_t>(r * c), 0.0f);
    return TensorView::contiguous(v.data(), DType::kF32, {r, c});
  };
  return MoeScratch{view(h.rows, pairs, s.hidden),          view(h.gate_up, pairs, 2 * s.inter),
                    view(h.act, pairs, s.inter),            view(h.out, pairs, s.hidden),
                    view(h.shared_gate_up, tokens, 2 * s.inter), view(h.shared_act, tokens, s.inter),
                    view(h.shared_out, tokens, s.hidden),   view(h.shared_logit, tokens, 1)};
}

MoeScratch device_scratch(Twin& twin, const MoeShape& s, std::int64_t tokens) {
  const std::int64_t pairs = tokens * s.top_k;
  auto view = [&](std::int64_t r, std::int64_t c) {
    return twin.empty(static_cast<std::size_t>(r * c) * 4, DType::kF32, {r, c});
  };
  return MoeScratch{view(pairs, s.hidden),         view(pairs, 2 * s.inter), view(pairs, s.inter),
                    view(pairs, s.hidden),         view(tokens, 2 * s.inter), view(tokens, s.inter),
                    view(tokens, s.hidden),        view(tokens, 1)};
}

// Router logits; `ties` rounds them to quarters so several experts often share the top logit.
std::vector<float> router_logits(std::int64_t tokens, std::int64_t experts, std::uint32_t seed, bool ties) {
  auto l = random_floats(static_cast<std::size_t>(tokens * experts), seed, 2.0f);
  if (ties) {
    for (float& v : l) v = std::round(v * 4.0f) / 4.0f;
  }
  return l;
}

// The GPU's output for `rows` of x (token t's row is x[rows[t]]), computed as one batch.
std::vector<float> gpu_moe(Twin& twin, const MoeShape& s, const Layer& layer, const std::vector<float>& x,
                           const std::vector<float>& logits, const std::vector<std::int64_t>& rows) {
  const auto tokens = static_cast<std::int64_t>(rows.size());
  std::vector<float> xs, ls;
  for (std::int64_t r : rows) {
    xs.insert(xs.end(), x.begin() + r * s.hidden, x.begin() + (r + 1) * s.hidden);
    ls.insert(ls.end(), logits.begin() + r * s.experts, logits.begin() + (r + 1) * s.experts);
  }
  const TensorView gx = twin.upload(xs, DType::kF32, {tokens, s.hidden});
  const TensorView gl = twin.upload(ls, DType::kF32, {tokens, s.experts});
  const TensorView gout = twin.empty(xs.size() * 4, DType::kF32, {tokens, s.hidden});
  twin.gpu().moe(gx, gl, layer.gpu, device_scratch(twin, s, tokens), gout);
  return twin.download<float>(gout, xs.size());
}

const std::vector<MoeShape>& shapes() {
  static const std::vector<MoeShape> s = {
      {8, 2, 64, 48, true, false, DType::kF32},     // Qwen3-MoE-like: normalised top-k
      {64, 8, 96, 40, false, false, DType::kBF16},  // many experts, unnormalised, BF16 weights
      {16, 4, 128, 64, true, true, DType::kBF16},   // Qwen3-Next-like: a gated shared expert
      {512, 10, 64, 16, true, true, DType::kF32},   // Qwen3-Next's expert count
  };
  return s;
}

TEST(CudaMoe, MatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 10;
  for (const MoeShape& s : shapes()) {
    const Layer layer = make_layer(twin, s, seed += 100);
    for (const std::int64_t tokens : {1, 5, 33, 300}) {
      for (const bool ties : {false, true}) {
        const auto x = random_floats(static_cast<std::size_t>(tokens * s.hidden), seed + 1, 1.0f);
        const auto logits = router_logits(tokens, s.experts, seed + 2, ties);
        std::vector<std::int64_t> all(static_cast<std::size_t>(tokens));
        for (std::int64_t t = 0; t < tokens; ++t) all[static_cast<std::size_t>(t)] = t;
        const std::vector<float> gpu = gpu_moe(twin, s, layer, x, logits, all);

        std::vector<float> cx = x, cl = logits, cpu(x.size());
        HostScratch h;
        twin.cpu().moe(TensorView::contiguous(cx.data(), DType::kF32, {tokens, s.hidden}),
                       TensorView::contiguous(cl.data(), DType::kF32, {tokens, s.experts}), layer.cpu,
                       host_scratch(h, s, tokens), TensorView::contiguous(cpu.data(), DType::kF32, {tokens, s.hidden}));
        expect_close(gpu, cpu, 2e-5f, 2e-4f,
                     "moe " + std::to_string(s.experts) + " experts, top " + std::to_string(s.top_k) + ", " +
                         std::to_string(tokens) + " tokens" + (ties ? ", tied logits" : ""));
      }
    }
  }
}

TEST(CudaMoe, TokenBitsDoNotDependOnTheBatch) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  for (const MoeShape& s : shapes()) {
    const Layer layer = make_layer(twin, s, 7);
    const std::int64_t tokens = 40;
    const auto x = random_floats(static_cast<std::size_t>(tokens * s.hidden), 8, 1.0f);
    const auto logits = router_logits(tokens, s.experts, 9, /*ties=*/true);
    std::vector<std::int64_t> all(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) all[static_cast<std::size_t>(t)] = t;
    const std::vector<float> batch = gpu_moe(twin, s, layer, x, logits, all);
    // Each token alone, and the batch reversed with a token repeated (so its experts hold it twice).
    std::vector<std::int64_t> shuffled(all.rbegin(), all.rend());
    shuffled.push_back(3);
    const std::vector<float> other = gpu_moe(twin, s, layer, x, logits, shuffled);
    for (std::int64_t t : {0, 3, 17, 39}) {
      const std::vector<float> alone = gpu_moe(twin, s, layer, x, logits, {t});
      const auto row = [&](const std::vector<float>& v, std::int64_t i) {
        return std::vector<float>(v.begin() + i * s.hidden, v.begin() + (i + 1) * s.hidden);
      };
      EXPECT_EQ(row(batch, t), alone) << "token " << t << " alone vs in the batch";
      const auto pos = static_cast<std::int64_t>(std::find(shuffled.begin(), shuffled.end(), t) - shuffled.begin());
      EXPECT_EQ(row(batch, t), row(other, pos)) << "token " << t << " in a reordered batch";
    }
    EXPECT_EQ(std::vector<float>(batch.begin() + 3 * s.hidden, batch.begin() + 4 * s.hidden),
              std::vector<float>(other.end() - s.hidden, other.end()))
        << "token 3's second copy";
  }
}

}  // namespace
}  // namespace baton
