// The register-blocked GEMM over packed weights (gemm_packed_kernels.h, packed_weights.h):
// each output element is the fused multiply-add chain over k in order (checked against a scalar
// std::fma reference, so the order itself is pinned), rows are bit-identical whatever rows ride
// along and however the panels are split, the tiers are bit-identical, and the backend packs at
// load and reads packed weights through linear() with the same bits at every thread count. The
// opt-in BF16-dot tier's own kernel over the same panels is checked for accuracy and invariance.
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/packed_weights.h"
#include "tests/kernels/cpu/test_util.h"

namespace baton::cpu {
namespace {

using testing::encode;
using testing::random_floats;
using testing::same_bits;
using testing::supported_isas;

struct Shape {
  std::int64_t m, n, k;
};

// A weight in both forms: row-major as f32 (rounded to its dtype) and packed.
struct Weight {
  DType dtype;
  std::int64_t n, k;
  std::vector<float> rounded;
  std::vector<std::uint8_t> packed;
};

Weight make_weight(DType dtype, std::int64_t n, std::int64_t k, std::uint32_t seed) {
  Weight w{dtype, n, k, {}, {}};
  const auto bytes = encode(random_floats(static_cast<std::size_t>(n * k), seed), dtype, &w.rounded);
  w.packed.resize(static_cast<std::size_t>(packed_weight_bytes(dtype, n, k)));
  pack_weight(bytes.data(), dtype, n, k, k, w.packed.data());
  return w;
}

std::vector<float> run_packed(const KernelTable& t, const Weight& w, std::int64_t m, const float* x, const float* bias,
                              std::int64_t panel_split = -1) {
  std::vector<float> y(static_cast<std::size_t>(m * w.n), -1.0f);
  PackedGemmArgs a;
  a.x = x;
  a.ldx = w.k;
  a.w = w.packed.data();
  a.w_dtype = w.dtype;
  a.n = w.n;
  a.bias = bias;
  a.y = y.data();
  a.ldy = w.n;
  a.rows = m;
  a.k = w.k;
  const std::int64_t panels = num_panels(w.n);
  if (panel_split > 0 && panel_split < panels) {
    t.gemm_packed(a, panel_split, panels);
    t.gemm_packed(a, 0, panel_split);
  } else {
    t.gemm_packed(a, 0, panels);
  }
  return y;
}

// The contract, one element at a time: acc = fma(x[kk], w[kk], acc) for kk in order, + bias.
std::vector<float> reference(const Weight& w, std::int64_t m, const float* x, const float* bias) {
  std::vector<float> y(static_cast<std::size_t>(m * w.n));
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t c = 0; c < w.n; ++c) {
      float acc = 0.0f;
      for (std::int64_t kk = 0; kk < w.k; ++kk) acc = std::fma(x[r * w.k + kk], w.rounded[static_cast<std::size_t>(c * w.k + kk)], acc);
      y[static_cast<std::size_t>(r * w.n + c)] = bias != nullptr ? acc + bias[c] : acc;
    }
  }
  return y;
}

const std::vector<Shape>& sweep() {
  // Ragged n (not a multiple of 16 or of a panel group) and k (odd, below and above a pair), row
  // counts up to past two register tiles, and k long enough to be split into blocks.
  static const std::vector<Shape> shapes = {{1, 1, 1},   {1, 16, 2},  {2, 17, 3},  {3, 33, 31}, {5, 48, 64},
                                            {7, 50, 77}, {8, 64, 96}, {9, 95, 33}, {13, 130, 129}, {17, 49, 200},
                                            {33, 80, 48}, {64, 40, 17},
                                            // one to five rows over many panels: the wider tiles of
                                            // few-row calls, whole groups and a partial one
                                            {1, 200, 65}, {2, 150, 70}, {1, 390, 40}, {3, 150, 70},
                                            {4, 230, 45}, {5, 200, 65},
                                            // several row tiles, in one k block and in several (partial
                                            // sums resumed from y): every tier's block is at most 8192
                                            // BF16 elements (gemm_packed_kernels.h, packed_block_k)
                                            {20, 35, 600}, {40, 97, 1031}, {12, 35, 8500}};
  return shapes;
}

TEST(GemmPacked, EachElementIsTheInOrderFmaChain) {
  for (CpuIsa isa : supported_isas()) {
    const KernelTable& t = kernel_table_for(isa);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      for (const Shape& s : sweep()) {
        for (bool with_bias : {false, true}) {
          const Weight w = make_weight(dtype, s.n, s.k, static_cast<std::uint32_t>(s.n * 7 + s.k));
          const auto x = random_floats(static_cast<std::size_t>(s.m * s.k), static_cast<std::uint32_t>(s.m + 3));
          const auto bias = random_floats(static_cast<std::size_t>(s.n), 99);
          const float* b = with_bias ? bias.data() : nullptr;
          EXPECT_TRUE(same_bits(run_packed(t, w, s.m, x.data(), b), reference(w, s.m, x.data(), b)))
              << isa_name(isa) << " " << dtype_name(dtype) << " m=" << s.m << " n=" << s.n << " k=" << s.k
              << " bias=" << with_bias;
        }
      }
    }
  }
}

TEST(GemmPacked, RowOfAnMRowGemmEqualsTheRowAlone) {
  for (CpuIsa isa : supported_isas()) {
    const KernelTable& t = kernel_table_for(isa);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const Weight w = make_weight(dtype, 83, 301, 5);
      const auto bias = random_floats(83, 6);
      for (std::int64_t m : {2, 5, 8, 9, 31, 64}) {
        const auto x = random_floats(static_cast<std::size_t>(m * w.k), static_cast<std::uint32_t>(100 + m));
        const auto batched = run_packed(t, w, m, x.data(), bias.data(), /*panel_split=*/2);
        for (std::int64_t r = 0; r < m; ++r) {
          const auto alone = run_packed(t, w, 1, x.data() + r * w.k, bias.data());
          const std::vector<float> row(batched.begin() + r * w.n, batched.begin() + (r + 1) * w.n);
          ASSERT_TRUE(same_bits(alone, row)) << isa_name(isa) << " " << dtype_name(dtype) << " m=" << m << " row " << r;
        }
      }
    }
  }
}

TEST(GemmPacked, TiersAreBitIdentical) {
  const auto isas = supported_isas();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (const Shape& s : sweep()) {
      const Weight w = make_weight(dtype, s.n, s.k, 11);
      const auto x = random_floats(static_cast<std::size_t>(s.m * s.k), 12);
      const auto bias = random_floats(static_cast<std::size_t>(s.n), 13);
      const auto first = run_packed(kernel_table_for(isas.front()), w, s.m, x.data(), bias.data());
      for (CpuIsa isa : isas) {
        EXPECT_TRUE(same_bits(first, run_packed(kernel_table_for(isa), w, s.m, x.data(), bias.data())))
            << isa_name(isa) << " vs " << isa_name(isas.front()) << " " << dtype_name(dtype) << " m=" << s.m
            << " n=" << s.n << " k=" << s.k;
      }
    }
  }
}

TEST(GemmPacked, BackendPacksAtLoadAndLinearIsInvariantAcrossThreadsAndBatches) {
  const std::int64_t m = 11, n = 200, k = 130;
  const auto x = random_floats(static_cast<std::size_t>(m * k), 41);
  std::vector<float> rounded;
  auto w = encode(random_floats(static_cast<std::size_t>(n * k), 42), DType::kBF16, &rounded);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    BackendOptions opts;
    opts.num_threads = threads;
    auto backend = CpuBackend::create(opts);
    ASSERT_TRUE(backend.ok()) << backend.status();
    TensorView packed;
    auto buf = (*backend)->pack_linear_weight(TensorView::contiguous(w.data(), DType::kBF16, {n, k}), &packed);
    ASSERT_TRUE(buf.ok()) << buf.status();
    ASSERT_NE(buf->data(), nullptr) << "the CPU backend packs BF16 weights";
    std::vector<float> y(static_cast<std::size_t>(m * n));
    (*backend)->linear(TensorView::contiguous(const_cast<float*>(x.data()), DType::kF32, {m, k}), packed, TensorView{},
                       TensorView::contiguous(y.data(), DType::kF32, {m, n}));
    results.push_back(y);
    for (std::int64_t r : {std::int64_t{0}, m - 1}) {
      std::vector<float> y1(static_cast<std::size_t>(n));
      (*backend)->linear(TensorView::contiguous(const_cast<float*>(x.data()) + r * k, DType::kF32, {1, k}), packed,
                         TensorView{}, TensorView::contiguous(y1.data(), DType::kF32, {1, n}));
      EXPECT_EQ(0, std::memcmp(y1.data(), y.data() + r * n, static_cast<std::size_t>(n) * sizeof(float))) << "row " << r;
    }
    // Against a float64 reference of the same rounded weights (the layout is right, not just stable).
    for (std::int64_t r = 0; r < m; ++r) {
      for (std::int64_t c = 0; c < n; ++c) {
        double ref = 0;
        for (std::int64_t kk = 0; kk < k; ++kk) {
          ref += static_cast<double>(x[static_cast<std::size_t>(r * k + kk)]) * rounded[static_cast<std::size_t>(c * k + kk)];
        }
        ASSERT_NEAR(y[static_cast<std::size_t>(r * n + c)], ref, 1e-3) << "row " << r << " col " << c;
      }
    }
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_TRUE(same_bits(results[0], results[2]));
}

TEST(GemmPacked, BackendLeavesF16RowMajorAndPacksBf16ForTheBf16DotTierToo) {
  auto backend = CpuBackend::create(BackendOptions{});
  ASSERT_TRUE(backend.ok());
  std::vector<std::uint16_t> w(64 * 32, 0);
  TensorView packed;
  auto buf = (*backend)->pack_linear_weight(TensorView::contiguous(w.data(), DType::kF16, {64, 32}), &packed);
  ASSERT_TRUE(buf.ok());
  EXPECT_EQ(buf->data(), nullptr);
  if (CpuFeatures::detect().supports(CpuIsa::kAvx512Bf16)) {
    BackendOptions o;
    o.cpu_isa = "avx512bf16";
    auto bf16 = CpuBackend::create(o);
    ASSERT_TRUE(bf16.ok());
    auto b2 = (*bf16)->pack_linear_weight(TensorView::contiguous(w.data(), DType::kBF16, {64, 32}), &packed);
    ASSERT_TRUE(b2.ok());
    EXPECT_NE(b2->data(), nullptr);
  }
}

// The opt-in avx512bf16 tier over packed BF16 panels: x rounded to BF16, one VDPBF16PS per k-pair.
// Its bits are the hardware's (no scalar twin to pin them), so: close to a float64 reference over
// the BF16-rounded x, and every row bit-identical whatever rides along and however panels split.
TEST(GemmPackedBf16Dot, MatchesReferenceOverBf16RoundedActivations) {
  if (!CpuFeatures::detect().supports(CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512-BF16";
  const KernelTable& t = kernel_table_for(CpuIsa::kAvx512Bf16);
  for (const Shape& s : sweep()) {
    const Weight w = make_weight(DType::kBF16, s.n, s.k, static_cast<std::uint32_t>(s.n * 3 + s.k));
    const auto x = random_floats(static_cast<std::size_t>(s.m * s.k), static_cast<std::uint32_t>(s.m + 5));
    const auto bias = random_floats(static_cast<std::size_t>(s.n), 98);
    const auto y = run_packed(t, w, s.m, x.data(), bias.data(), /*panel_split=*/1);
    for (std::int64_t i = 0; i < s.m; ++i) {
      for (std::int64_t c = 0; c < s.n; ++c) {
        double ref = bias[static_cast<std::size_t>(c)], mag = std::fabs(ref);
        for (std::int64_t kk = 0; kk < s.k; ++kk) {
          const double xr = bf16_to_f32(f32_to_bf16(x[static_cast<std::size_t>(i * s.k + kk)]));
          const double prod = xr * w.rounded[static_cast<std::size_t>(c * s.k + kk)];
          ref += prod;
          mag += std::fabs(prod);
        }
        ASSERT_NEAR(y[static_cast<std::size_t>(i * s.n + c)], ref, 1e-6 * mag * std::sqrt(static_cast<double>(s.k)) + 1e-30)
            << "m=" << s.m << " n=" << s.n << " k=" << s.k << " row " << i << " col " << c;
      }
    }
  }
}

TEST(GemmPackedBf16Dot, RowOfAnMRowGemmEqualsTheRowAlone) {
  if (!CpuFeatures::detect().supports(CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512-BF16";
  const KernelTable& t = kernel_table_for(CpuIsa::kAvx512Bf16);
  for (std::int64_t k : {301, 3001}) {  // one k block, and several (blocks of 2730 on AVX-512)
    const Weight w = make_weight(DType::kBF16, 83, k, 7);
    const auto bias = random_floats(83, 8);
    for (std::int64_t m : {2, 5, 8, 9, 31, 64}) {
      const auto x = random_floats(static_cast<std::size_t>(m * w.k), static_cast<std::uint32_t>(200 + m));
      const auto batched = run_packed(t, w, m, x.data(), bias.data(), /*panel_split=*/2);
      for (std::int64_t r = 0; r < m; ++r) {
        const auto alone = run_packed(t, w, 1, x.data() + r * w.k, bias.data());
        const std::vector<float> row(batched.begin() + r * w.n, batched.begin() + (r + 1) * w.n);
        ASSERT_TRUE(same_bits(alone, row)) << "k=" << k << " m=" << m << " row " << r;
      }
    }
  }
}

TEST(GemmPackedBf16Dot, F32WeightsKeepTheExactPath) {
  if (!CpuFeatures::detect().supports(CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512-BF16";
  const Weight w = make_weight(DType::kF32, 50, 77, 9);
  const auto x = random_floats(static_cast<std::size_t>(7 * w.k), 10);
  EXPECT_TRUE(same_bits(run_packed(kernel_table_for(CpuIsa::kAvx512Bf16), w, 7, x.data(), nullptr),
                        reference(w, 7, x.data(), nullptr)));
}

}  // namespace
}  // namespace baton::cpu
