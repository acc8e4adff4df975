// GEMM kernels: accuracy against a float64 reference over a sweep of shapes and weight dtypes,
// bit-identical results across ISA tiers, and batch invariance (a row's bits do not depend on the
// other rows in the call or on the thread split).
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/cpu/test_util.h"

namespace baton::cpu {
namespace {

using testing::encode;
using testing::random_floats;
using testing::same_bits;
using testing::supported_isas;

struct Problem {
  std::int64_t m, n, k;
  DType w_dtype;
  bool bias;
};

std::vector<float> run_gemm(const KernelTable& table, const Problem& p, const std::vector<float>& x,
                            const std::vector<std::uint8_t>& w, const std::vector<float>& bias,
                            std::int64_t n_split = 0) {
  std::vector<float> y(static_cast<std::size_t>(p.m * p.n), -1.0f);
  GemmArgs a;
  a.x = x.data();
  a.ldx = p.k;
  a.w = w.data();
  a.w_dtype = p.w_dtype;
  a.ldw = p.k;
  a.bias = p.bias ? bias.data() : nullptr;
  a.y = y.data();
  a.ldy = p.n;
  a.rows = p.m;
  a.k = p.k;
  if (n_split > 0 && n_split < p.n) {
    table.gemm(a, 0, n_split);
    table.gemm(a, n_split, p.n);
  } else {
    table.gemm(a, 0, p.n);
  }
  return y;
}

TEST(Gemm, MatchesFloat64ReferenceOverShapeSweep) {
  for (CpuIsa isa : supported_isas()) {
    const KernelTable& table = kernel_table_for(isa);
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (std::int64_t m : {1, 2, 3, 5, 8}) {
        for (std::int64_t n : {1, 3, 4, 7, 17, 33}) {
          for (std::int64_t k : {1, 15, 16, 17, 64, 100, 257}) {
            const Problem p{m, n, k, dt, (n % 2) == 1};
            const auto x = random_floats(static_cast<std::size_t>(m * k), 1);
            std::vector<float> w_rounded;
            const auto w = encode(random_floats(static_cast<std::size_t>(n * k), 2, 0.5f), dt, &w_rounded);
            const auto bias = random_floats(static_cast<std::size_t>(n), 3);
            const auto y = run_gemm(table, p, x, w, bias);
            for (std::int64_t i = 0; i < m; ++i) {
              for (std::int64_t j = 0; j < n; ++j) {
                double ref = p.bias ? bias[static_cast<std::size_t>(j)] : 0.0;
                double mag = std::fabs(ref);
                for (std::int64_t kk = 0; kk < k; ++kk) {
                  const double prod = static_cast<double>(x[static_cast<std::size_t>(i * k + kk)]) *
                                      w_rounded[static_cast<std::size_t>(j * k + kk)];
                  ref += prod;
                  mag += std::fabs(prod);
                }
                // f32 accumulation: error bounded by ~k ulps of the sum of magnitudes.
                const double tol = 1e-6 * mag * std::sqrt(static_cast<double>(k)) + 1e-30;
                ASSERT_NEAR(y[static_cast<std::size_t>(i * n + j)], ref, tol)
                    << isa_name(isa) << " " << dtype_name(dt) << " m=" << m << " n=" << n << " k=" << k
                    << " at (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
}

TEST(Gemm, TiersAreBitIdentical) {
  const auto isas = supported_isas();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Problem& p : {Problem{1, 37, 200, dt, true}, Problem{7, 29, 131, dt, false},
                             Problem{16, 64, 768, dt, true}}) {
      const auto x = random_floats(static_cast<std::size_t>(p.m * p.k), 11);
      std::vector<float> unused;
      const auto w = encode(random_floats(static_cast<std::size_t>(p.n * p.k), 12), dt, &unused);
      const auto bias = random_floats(static_cast<std::size_t>(p.n), 13);
      const auto expected = run_gemm(kernel_table_for(CpuIsa::kPortable), p, x, w, bias);
      for (CpuIsa isa : isas) {
        EXPECT_TRUE(same_bits(run_gemm(kernel_table_for(isa), p, x, w, bias), expected))
            << isa_name(isa) << " differs from portable for " << dtype_name(dt) << " m=" << p.m;
      }
    }
  }
}

TEST(Gemm, RowResultDoesNotDependOnBatchOrSplit) {
  for (CpuIsa isa : supported_isas()) {
    const KernelTable& table = kernel_table_for(isa);
    const Problem full{13, 45, 300, DType::kBF16, true};
    const auto x = random_floats(static_cast<std::size_t>(full.m * full.k), 21);
    std::vector<float> unused;
    const auto w = encode(random_floats(static_cast<std::size_t>(full.n * full.k), 22), full.w_dtype, &unused);
    const auto bias = random_floats(static_cast<std::size_t>(full.n), 23);
    const auto batched = run_gemm(table, full, x, w, bias, /*n_split=*/19);
    for (std::int64_t row = 0; row < full.m; ++row) {
      Problem one = full;
      one.m = 1;
      const std::vector<float> xrow(x.begin() + row * full.k, x.begin() + (row + 1) * full.k);
      const auto alone = run_gemm(table, one, xrow, w, bias);
      const std::vector<float> from_batch(batched.begin() + row * full.n, batched.begin() + (row + 1) * full.n);
      EXPECT_TRUE(same_bits(alone, from_batch)) << isa_name(isa) << " row " << row;
    }
  }
}

TEST(Gemm, BackendLinearIsBatchInvariantAcrossThreadCounts) {
  const std::int64_t m = 9, n = 70, k = 96;
  const auto x = random_floats(static_cast<std::size_t>(m * k), 31);
  const auto w = random_floats(static_cast<std::size_t>(n * k), 32);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    BackendOptions opts;
    opts.num_threads = threads;
    auto backend = CpuBackend::create(opts);
    ASSERT_TRUE(backend.ok()) << backend.status();
    std::vector<float> y(static_cast<std::size_t>(m * n));
    (*backend)->linear(TensorView::contiguous(const_cast<float*>(x.data()), DType::kF32, {m, k}),
                       TensorView::contiguous(const_cast<float*>(w.data()), DType::kF32, {n, k}), TensorView{},
                       TensorView::contiguous(y.data(), DType::kF32, {m, n}));
    results.push_back(y);
    // The last row computed alone.
    std::vector<float> y1(static_cast<std::size_t>(n));
    (*backend)->linear(TensorView::contiguous(const_cast<float*>(x.data()) + (m - 1) * k, DType::kF32, {1, k}),
                       TensorView::contiguous(const_cast<float*>(w.data()), DType::kF32, {n, k}), TensorView{},
                       TensorView::contiguous(y1.data(), DType::kF32, {1, n}));
    EXPECT_EQ(0, std::memcmp(y1.data(), y.data() + (m - 1) * n, static_cast<std::size_t>(n) * sizeof(float)));
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_TRUE(same_bits(results[0], results[2]));
}

TEST(Gemm, OpenBlasOptInMatchesWithinTolerance) {
  const std::int64_t m = 32, n = 48, k = 160;
  const auto x = random_floats(static_cast<std::size_t>(m * k), 41);
  const auto w = random_floats(static_cast<std::size_t>(n * k), 42);
  const auto bias = random_floats(static_cast<std::size_t>(n), 43);
  std::vector<float> exact(static_cast<std::size_t>(m * n)), fast(exact.size());
  for (bool invariant : {true, false}) {
    BackendOptions opts;
    opts.batch_invariant = invariant;
    auto backend = CpuBackend::create(opts);
    ASSERT_TRUE(backend.ok());
    (*backend)->linear(TensorView::contiguous(const_cast<float*>(x.data()), DType::kF32, {m, k}),
                       TensorView::contiguous(const_cast<float*>(w.data()), DType::kF32, {n, k}),
                       TensorView::contiguous(const_cast<float*>(bias.data()), DType::kF32, {n}),
                       TensorView::contiguous((invariant ? exact : fast).data(), DType::kF32, {m, n}));
  }
  for (std::size_t i = 0; i < exact.size(); ++i) EXPECT_NEAR(exact[i], fast[i], 1e-3f) << i;
}

}  // namespace
}  // namespace baton::cpu

namespace baton::cpu {
namespace {

// The opt-in avx512bf16 tier rounds x to BF16 for BF16 weights and multiplies with VDPBF16PS:
// exact products, f32 sums. Against a float64 reference over the BF16-rounded x it must be as
// close as the exact tiers are, and its rows must be batch-invariant.
TEST(Bf16DotTier, MatchesReferenceOverBf16RoundedActivations) {
  if (!CpuFeatures::detect().supports(CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512-BF16";
  const KernelTable& table = kernel_table_for(CpuIsa::kAvx512Bf16);
  for (std::int64_t m : {1, 3, 6}) {
    for (std::int64_t n : {1, 5, 33}) {
      for (std::int64_t k : {1, 31, 32, 33, 100, 768}) {
        const Problem p{m, n, k, DType::kBF16, true};
        const auto x = random_floats(static_cast<std::size_t>(m * k), 51);
        std::vector<float> w_rounded;
        const auto w = encode(random_floats(static_cast<std::size_t>(n * k), 52, 0.5f), DType::kBF16, &w_rounded);
        const auto bias = random_floats(static_cast<std::size_t>(n), 53);
        const auto y = run_gemm(table, p, x, w, bias);
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double ref = bias[static_cast<std::size_t>(j)], mag = std::fabs(ref);
            for (std::int64_t kk = 0; kk < k; ++kk) {
              const double xr = bf16_to_f32(f32_to_bf16(x[static_cast<std::size_t>(i * k + kk)]));
              const double prod = xr * w_rounded[static_cast<std::size_t>(j * k + kk)];
              ref += prod;
              mag += std::fabs(prod);
            }
            ASSERT_NEAR(y[static_cast<std::size_t>(i * n + j)], ref, 1e-6 * mag * std::sqrt(static_cast<double>(k)) + 1e-30)
                << "m=" << m << " n=" << n << " k=" << k;
          }
        }
      }
    }
  }
}

TEST(Bf16DotTier, RowsAreBatchInvariant) {
  if (!CpuFeatures::detect().supports(CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512-BF16";
  const KernelTable& table = kernel_table_for(CpuIsa::kAvx512Bf16);
  const Problem full{11, 40, 300, DType::kBF16, false};
  const auto x = random_floats(static_cast<std::size_t>(full.m * full.k), 61);
  std::vector<float> unused;
  const auto w = encode(random_floats(static_cast<std::size_t>(full.n * full.k), 62), DType::kBF16, &unused);
  const auto batched = run_gemm(table, full, x, w, {}, /*n_split=*/13);
  for (std::int64_t row = 0; row < full.m; ++row) {
    Problem one = full;
    one.m = 1;
    const std::vector<float> xrow(x.begin() + row * full.k, x.begin() + (row + 1) * full.k);
    const std::vector<float> from_batch(batched.begin() + row * full.n, batched.begin() + (row + 1) * full.n);
    EXPECT_TRUE(same_bits(run_gemm(table, one, xrow, w, {}), from_batch)) << "row " << row;
  }
}

}  // namespace
}  // namespace baton::cpu
