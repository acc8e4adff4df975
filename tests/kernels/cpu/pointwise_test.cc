// Row-wise and elementwise CPU ops against plain references: RMSNorm (alone and fused with the
// residual add), SiLU·mul, SiLU + residual, exp, RoPE, embedding lookup, gathers; tiers bit-identical where the op
// reduces.
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/cpu/test_util.h"

namespace baton::cpu {
namespace {

using testing::random_floats;
using testing::same_bits;
using testing::supported_isas;

std::unique_ptr<CpuBackend> backend(int threads = 2) {
  BackendOptions o;
  o.num_threads = threads;
  auto b = CpuBackend::create(o);
  BATON_CHECK(b.ok(), b.status().ToString());
  return std::move(*b);
}

TEST(RmsNorm, MatchesReferenceAndTiersAgree) {
  for (std::int64_t dim : {1, 7, 16, 18, 72, 768, 1000}) {
    const auto x = random_floats(static_cast<std::size_t>(dim), 1, 3.0f);
    const auto w = random_floats(static_cast<std::size_t>(dim), 2);
    std::vector<float> expected_bits;
    for (CpuIsa isa : supported_isas()) {
      std::vector<float> out(static_cast<std::size_t>(dim));
      kernel_table_for(isa).rms_norm_row(x.data(), w.data(), 1e-6f, out.data(), dim);
      double ss = 0;
      for (float v : x) ss += static_cast<double>(v) * v;
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + 1e-6);
      for (std::int64_t i = 0; i < dim; ++i) {
        const auto u = static_cast<std::size_t>(i);
        ASSERT_NEAR(out[u], x[u] * inv * w[u], 1e-5 * std::fabs(x[u] * inv * w[u]) + 1e-7) << dim << " " << i;
      }
      if (expected_bits.empty()) expected_bits = out;
      EXPECT_TRUE(same_bits(out, expected_bits)) << isa_name(isa);
    }
  }
}

TEST(RmsNorm, BackendNormalizesStridedHeadsInPlace) {
  // Per-head norm of q inside a fused qkv row: [tokens, heads, head_dim] with a token stride.
  const std::int64_t tokens = 3, heads = 2, hd = 24, row = 5 * hd;
  auto qkv = random_floats(static_cast<std::size_t>(tokens * row), 3);
  const auto original = qkv;
  const auto w = random_floats(static_cast<std::size_t>(hd), 4);
  TensorView q = TensorView::contiguous(qkv.data(), DType::kF32, {tokens, row}).slice_last(0, heads * hd).split_last(heads);
  backend()->rms_norm(q, TensorView::contiguous(const_cast<float*>(w.data()), DType::kF32, {hd}), 1e-6f, q);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* x = original.data() + t * row + h * hd;
      double ss = 0;
      for (std::int64_t i = 0; i < hd; ++i) ss += static_cast<double>(x[i]) * x[i];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hd) + 1e-6);
      for (std::int64_t i = 0; i < hd; ++i) {
        EXPECT_NEAR(qkv[static_cast<std::size_t>(t * row + h * hd + i)], x[i] * inv * w[static_cast<std::size_t>(i)], 1e-5);
      }
    }
    // The k/v part of the row is untouched.
    for (std::int64_t i = heads * hd; i < row; ++i) {
      EXPECT_EQ(qkv[static_cast<std::size_t>(t * row + i)], original[static_cast<std::size_t>(t * row + i)]);
    }
  }
}

TEST(AddRmsNorm, EqualsAddThenNormBitForBit) {
  // Enough rows of 768 for both threads to take a share; out aliases x as in the decoder layer.
  const std::int64_t rows = 100, dim = 768;
  const auto residual0 = random_floats(static_cast<std::size_t>(rows * dim), 5, 3.0f);
  const auto x0 = random_floats(static_cast<std::size_t>(rows * dim), 6);
  const auto w = random_floats(static_cast<std::size_t>(dim), 7);
  auto view = [&](const std::vector<float>& v) {
    return TensorView::contiguous(const_cast<float*>(v.data()), DType::kF32, {rows, dim});
  };
  const TensorView wv = TensorView::contiguous(const_cast<float*>(w.data()), DType::kF32, {dim});
  auto b = backend();
  std::vector<float> res_two = residual0, x_two = x0;
  b->add(view(res_two), view(x_two), view(res_two));
  b->rms_norm(view(res_two), wv, 1e-5f, view(x_two));
  std::vector<float> res_fused = residual0, x_fused = x0;
  b->add_rms_norm(view(res_fused), view(x_fused), wv, 1e-5f, view(x_fused));
  EXPECT_TRUE(same_bits(res_fused, res_two));
  EXPECT_TRUE(same_bits(x_fused, x_two));
  EXPECT_FALSE(same_bits(x_fused, x0));
}

TEST(Exp, WithinTwoUlpOverTheUsefulRange) {
  std::vector<float> xs;
  for (float x = -87.0f; x <= 88.0f; x += 0.01f) xs.push_back(x);
  for (CpuIsa isa : supported_isas()) {
    auto ys = xs;
    kernel_table_for(isa).exp_inplace(ys.data(), static_cast<std::int64_t>(ys.size()));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double ref = std::exp(static_cast<double>(xs[i]));
      ASSERT_NEAR(ys[i], ref, 2.5e-7 * ref) << isa_name(isa) << " exp(" << xs[i] << ")";
    }
  }
}

TEST(SiluMul, MatchesReferenceAndTiersAgree) {
  const std::int64_t n = 133;
  const auto g = random_floats(static_cast<std::size_t>(n), 5, 4.0f);
  const auto u = random_floats(static_cast<std::size_t>(n), 6);
  std::vector<float> first;
  for (CpuIsa isa : supported_isas()) {
    std::vector<float> out(static_cast<std::size_t>(n));
    kernel_table_for(isa).silu_mul_row(g.data(), u.data(), out.data(), n);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      ASSERT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-7) << isa_name(isa) << " " << i;
    }
    if (first.empty()) first = out;
    EXPECT_TRUE(same_bits(out, first)) << isa_name(isa);
  }
}

TEST(SiluAdd, MatchesReferenceInPlaceAndStrided) {
  auto b = backend();
  const std::int64_t rows = 5, cols = 37;
  const auto x = random_floats(static_cast<std::size_t>(rows * cols), 11, 6.0f);
  // The residual is the left half of wider rows (a strided view), updated in place.
  auto wide = random_floats(static_cast<std::size_t>(rows * 2 * cols), 12);
  const auto before = wide;
  auto xc = x;
  const TensorView res = TensorView::contiguous(wide.data(), DType::kF32, {rows, 2 * cols}).slice_last(0, cols);
  b->silu_add(TensorView::contiguous(xc.data(), DType::kF32, {rows, cols}), res, res);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < 2 * cols; ++i) {
      const auto w = static_cast<std::size_t>(r * 2 * cols + i);
      if (i >= cols) {
        ASSERT_EQ(wide[w], before[w]) << "outside the view, row " << r << " col " << i;
        continue;
      }
      const double v = x[static_cast<std::size_t>(r * cols + i)];
      const double ref = before[w] + v / (1.0 + std::exp(-v));
      ASSERT_NEAR(wide[w], ref, 1e-6 * std::fabs(ref) + 1e-6) << r << " " << i;
    }
  }
}

TEST(Rope, RotatesHalvesLikeTheReference) {
  auto b = backend();
  const std::int64_t tokens = 4, heads = 3, hd = 10, half = hd / 2;
  std::vector<std::int32_t> pos = {0, 1, 17, 1000};
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) inv_freq[static_cast<std::size_t>(i)] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / hd));
  std::vector<float> cs(static_cast<std::size_t>(tokens * hd));
  b->rope_cos_sin(TensorView::contiguous(pos.data(), DType::kI32, {tokens}),
                  TensorView::contiguous(inv_freq.data(), DType::kF32, {half}),
                  TensorView::contiguous(cs.data(), DType::kF32, {tokens, hd}));
  auto x = random_floats(static_cast<std::size_t>(tokens * heads * hd), 7);
  const auto orig = x;
  b->apply_rope(TensorView::contiguous(x.data(), DType::kF32, {tokens, heads, hd}),
                TensorView::contiguous(cs.data(), DType::kF32, {tokens, hd}));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(static_cast<float>(pos[static_cast<std::size_t>(t)]) * inv_freq[static_cast<std::size_t>(i)]);
        const double c = std::cos(angle), s = std::sin(angle);
        const std::size_t base = static_cast<std::size_t>((t * heads + h) * hd);
        const double a = orig[base + static_cast<std::size_t>(i)], bb = orig[base + static_cast<std::size_t>(i + half)];
        EXPECT_NEAR(x[base + static_cast<std::size_t>(i)], a * c - bb * s, 1e-5);
        EXPECT_NEAR(x[base + static_cast<std::size_t>(i + half)], bb * c + a * s, 1e-5);
      }
    }
  }
}

TEST(Embedding, WidensEveryDtypeExactly) {
  auto b = backend();
  const std::int64_t vocab = 11, dim = 19;
  const auto values = random_floats(static_cast<std::size_t>(vocab * dim), 8);
  std::vector<std::int32_t> ids = {3, 0, 10, 3};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<float> rounded;
    auto table = testing::encode(values, dt, &rounded);
    std::vector<float> out(ids.size() * static_cast<std::size_t>(dim));
    b->embedding(TensorView::contiguous(table.data(), dt, {vocab, dim}),
                 TensorView::contiguous(ids.data(), DType::kI32, {4}),
                 TensorView::contiguous(out.data(), DType::kF32, {4, dim}));
    for (std::size_t t = 0; t < ids.size(); ++t) {
      for (std::int64_t i = 0; i < dim; ++i) {
        EXPECT_EQ(out[t * static_cast<std::size_t>(dim) + static_cast<std::size_t>(i)],
                  rounded[static_cast<std::size_t>(ids[t] * dim + i)]);
      }
    }
  }
}

TEST(GatherRows, PicksRequestedRows) {
  auto b = backend();
  auto src = random_floats(5 * 7, 9);
  std::vector<std::int32_t> idx = {4, 0, 4};
  std::vector<float> out(3 * 7);
  b->gather_rows(TensorView::contiguous(src.data(), DType::kF32, {5, 7}),
                 TensorView::contiguous(idx.data(), DType::kI32, {3}),
                 TensorView::contiguous(out.data(), DType::kF32, {3, 7}));
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t c = 0; c < 7; ++c) EXPECT_EQ(out[r * 7 + c], src[static_cast<std::size_t>(idx[r]) * 7 + c]);
}

}  // namespace
}  // namespace baton::cpu
