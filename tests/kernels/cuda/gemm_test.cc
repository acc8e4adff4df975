// linear() on the CUDA backend (kernels/cuda/gemm*.cu) against the CPU backend reading the same
// weights, over row counts from decode (1) to prefill-sized tiles, shapes with k tails, all three
// weight dtypes, bias, padded and unaligned strides; plus the two properties the engine relies on:
// the batch-invariant path's reduction order is exactly the documented one (replayed on the host,
// compared bit for bit), and a row's result is bit-identical alone or in any batch. Skipped
// without a GPU.
//
// Tolerances (CPU comparisons). x ~ N(0, 1) and w ~ N(0, 0.05^2), so each output is a sum of k
// independent products of scale s = 1 * 0.05 and has typical magnitude sqrt(k) * s; tolerances
// are absolute, a fraction of that:
//   - invariant path and cuBLAS F32 (pedantic): 2^-13 * sqrt(k) * s. Both sides sum the same
//     products in F32 in different orders; the rounding noise of even a fully sequential order is
//     ~2^-24 * k / sqrt(2) * s, at most 1/30 of the tolerance for k <= 9001 here. A wrong, missing
//     or doubled product moves an output by ~s, at least 80x the tolerance (k <= 9001).
//   - cuBLAS BF16/F16: x is rounded to the weight's dtype first (relative error uniform in
//     +-2^-9 / +-2^-11, std 2^-9 / sqrt(3) resp. 2^-11 / sqrt(3)), so outputs carry noise of std
//     sqrt(k) * s * 2^-9 / sqrt(3) (F16: 2^-11 / sqrt(3)); the tolerances 2^-6 resp. 2^-8 times
//     sqrt(k) * s are ~14 of those standard deviations.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/dtype.h"
#include "tests/kernels/cuda/twin_test_util.h"

namespace baton {
namespace {

using cuda_testing::random_floats;
using cuda_testing::Twin;

constexpr float kXScale = 1.0f;
constexpr float kWScale = 0.05f;

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }

std::string dtype_str(DType dt) { return std::string(dtype_name(dt)); }

// Where the operands sit in memory.
struct Layout {
  const char* name;
  std::int64_t ldx_extra, ldy_extra;  // row stride = k (x) / n (y) + extra
  bool pad_w;                         // weight rows round_up(k, 8) + 8 apart (16-byte aligned)
  bool odd_w;                         // weight rows k + 1 apart, base one element into the buffer
  bool bias;
};
constexpr Layout kContiguous = {"contiguous", 0, 0, false, false, false};
constexpr Layout kPadded = {"padded", 4, 3, true, false, true};
constexpr Layout kUnaligned = {"unaligned", 1, 1, false, true, true};

// A weight [n, k] of one dtype, rows ldw apart, starting `offset` elements into its host buffer;
// `values` holds the exact (widened) values, [n, k] contiguous. Padding holds NaNs.
struct HostWeight {
  DType dtype = DType::kF32;
  std::int64_t n = 0, k = 0, ldw = 0, offset = 0;
  std::vector<float> f32;
  std::vector<std::uint16_t> half;
  std::vector<float> values;

  std::size_t elem_bytes() const { return dtype == DType::kF32 ? 4 : 2; }
  std::size_t elements() const { return static_cast<std::size_t>(offset + n * ldw); }
  // The host buffer (the CPU backend takes non-const views; it does not write weights).
  void* host_base() const {
    return dtype == DType::kF32 ? static_cast<void*>(const_cast<float*>(f32.data()))
                                : static_cast<void*>(const_cast<std::uint16_t*>(half.data()));
  }
  // The [n, k] view of a buffer laid out like the host one.
  TensorView view(void* buffer) const {
    auto* base = static_cast<unsigned char*>(buffer) + static_cast<std::size_t>(offset) * elem_bytes();
    return TensorView::contiguous(base, dtype, {n, ldw}).slice_last(0, k);
  }
};

HostWeight make_weight(DType dt, std::int64_t n, std::int64_t k, const Layout& layout, std::uint32_t seed) {
  HostWeight w;
  w.dtype = dt;
  w.n = n;
  w.k = k;
  w.ldw = layout.odd_w ? k + 1 : layout.pad_w ? round_up(k, 8) + 8 : k;
  w.offset = layout.odd_w ? 1 : 0;
  const auto src = random_floats(static_cast<std::size_t>(n * k), seed, kWScale);
  w.values.resize(src.size());
  if (dt == DType::kF32) {
    w.f32.assign(w.elements(), std::nanf(""));
  } else {
    w.half.assign(w.elements(), dt == DType::kBF16 ? 0x7fc0 : 0x7e00);  // NaN
  }
  for (std::int64_t c = 0; c < n; ++c) {
    for (std::int64_t i = 0; i < k; ++i) {
      const std::size_t at = static_cast<std::size_t>(w.offset + c * w.ldw + i);
      const std::size_t vi = static_cast<std::size_t>(c * k + i);
      if (dt == DType::kF32) {
        w.f32[at] = src[vi];
        w.values[vi] = src[vi];
      } else if (dt == DType::kBF16) {
        w.half[at] = f32_to_bf16(src[vi]);
        w.values[vi] = bf16_to_f32(w.half[at]);
      } else {
        w.half[at] = f32_to_f16(src[vi]);
        w.values[vi] = f16_to_f32(w.half[at]);
      }
    }
  }
  return w;
}

TensorView upload_weight(Twin& twin, const HostWeight& w) {
  const auto count = static_cast<std::int64_t>(w.elements());
  const TensorView buf =
      w.dtype == DType::kF32 ? twin.upload(w.f32, DType::kF32, {count}) : twin.upload(w.half, w.dtype, {count});
  return w.view(buf.data);
}

// x [m, k] rows ldx apart (padding NaN), as a host vector.
std::vector<float> make_x(std::int64_t m, std::int64_t k, std::int64_t ldx, std::uint32_t seed) {
  const auto values = random_floats(static_cast<std::size_t>(m * k), seed, kXScale);
  std::vector<float> x(static_cast<std::size_t>(m * ldx), std::nanf(""));
  for (std::int64_t r = 0; r < m; ++r) {
    std::memcpy(&x[static_cast<std::size_t>(r * ldx)], &values[static_cast<std::size_t>(r * k)],
                static_cast<std::size_t>(k) * 4);
  }
  return x;
}

struct Result {
  std::vector<float> gpu, cpu;  // [m, n] contiguous
};

// One linear() on both backends with the same operands. Also checks that the GPU left y's row
// padding alone.
Result run_linear(Twin& twin, std::int64_t m, const HostWeight& w, TensorView gw, const Layout& layout,
                  std::uint32_t seed) {
  const std::int64_t n = w.n, k = w.k;
  const std::int64_t ldx = k + layout.ldx_extra, ldy = n + layout.ldy_extra;
  auto x = make_x(m, k, ldx, seed);
  auto bias = random_floats(static_cast<std::size_t>(n), seed + 1, 0.5f);
  const TensorView gx = twin.upload(x, DType::kF32, {m, ldx}).slice_last(0, k);
  const TensorView gy = twin.empty(static_cast<std::size_t>(m * ldy) * 4, DType::kF32, {m, ldy});
  const TensorView gb = layout.bias ? twin.upload(bias, DType::kF32, {n}) : TensorView{};
  twin.gpu().linear(gx, gw, gb, gy.slice_last(0, n));

  Result res;
  res.cpu.assign(static_cast<std::size_t>(m * n), 0.0f);
  twin.cpu().linear(TensorView::contiguous(x.data(), DType::kF32, {m, ldx}).slice_last(0, k), w.view(w.host_base()),
                    layout.bias ? TensorView::contiguous(bias.data(), DType::kF32, {n}) : TensorView{},
                    TensorView::contiguous(res.cpu.data(), DType::kF32, {m, n}));

  const auto y = twin.download<std::uint32_t>(gy, static_cast<std::size_t>(m * ldy));
  res.gpu.resize(static_cast<std::size_t>(m * n));
  int bad_padding = 0;
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t c = 0; c < ldy; ++c) {
      const std::uint32_t bits = y[static_cast<std::size_t>(r * ldy + c)];
      if (c < n) {
        std::memcpy(&res.gpu[static_cast<std::size_t>(r * n + c)], &bits, 4);
      } else if (bits != 0xffffffffu) {
        ++bad_padding;
      }
    }
  }
  EXPECT_EQ(bad_padding, 0) << "linear() wrote into y's row padding";
  return res;
}

void expect_close(const Result& r, float atol, const std::string& what) {
  cuda_testing::expect_close(r.gpu, r.cpu, atol, 0.0f, what);
}

float scale(std::int64_t k) { return std::sqrt(static_cast<float>(k)) * kXScale * kWScale; }
constexpr float kInvariantTol = 1.0f / 8192;  // 2^-13, see the file comment

struct Shape {
  std::int64_t n, k;
};
// k tails: 77 = 9 * 8 + 5 (short last chunk), 1000 (not a multiple of 256), 9001 (several x slabs
// at every tile height, a 1-element tail).
constexpr Shape kShapes[] = {{33, 77}, {256, 1000}, {4096, 512}, {70, 9001}};
constexpr DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

std::string label(const char* path, std::int64_t m, const Shape& s, DType dt, const Layout& layout) {
  return std::string(path) + " m=" + std::to_string(m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " " + dtype_str(dt) + " " + layout.name;
}

TEST(CudaLinear, InvariantPathMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    for (const DType dt : kDtypes) {
      for (const Layout* layout : {&kContiguous, &kPadded, &kUnaligned}) {
        const HostWeight w = make_weight(dt, s.n, s.k, *layout, seed++);
        const TensorView gw = upload_weight(twin, w);
        for (const std::int64_t m : {1, 2, 5, 8, 17, 64, 200}) {
          const Result r = run_linear(twin, m, w, gw, *layout, seed++);
          expect_close(r, kInvariantTol * scale(s.k), label("invariant", m, s, dt, *layout));
        }
      }
    }
  }
}

// The reduction order gemm_invariant.cu documents, on the host: lane l folds chunks l, l + 32, ...
// (8 elements each, the last one short) with fmaf from +0; the 32 lane sums meet in an xor
// butterfly (16, 8, 4, 2, 1); the bias comes last.
float reference_dot(const float* x, const float* w, std::int64_t k, const float* bias) {
  float lanes[32];
  const std::int64_t full = k / 8, chunks = (k + 7) / 8;
  for (int l = 0; l < 32; ++l) {
    float acc = 0.0f;
    for (std::int64_t j = l; j < chunks; j += 32) {
      const std::int64_t count = j < full ? 8 : k - 8 * full;
      for (std::int64_t t = 0; t < count; ++t) acc = std::fma(x[8 * j + t], w[8 * j + t], acc);
    }
    lanes[l] = acc;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ offset];
    std::memcpy(lanes, next, sizeof(lanes));
  }
  return bias != nullptr ? lanes[0] + *bias : lanes[0];
}

TEST(CudaLinear, InvariantPathFollowsTheDocumentedOrderBitForBit) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  if (twin.cpu_stand_in()) GTEST_SKIP() << "the order replayed is the GPU kernel's, not the CPU's";
  std::uint32_t seed = 300;
  for (const Shape& s : {Shape{33, 77}, Shape{256, 1000}, Shape{70, 9001}, Shape{40, 5}}) {
    for (const DType dt : kDtypes) {
      for (const Layout* layout : {&kContiguous, &kUnaligned}) {
        const HostWeight w = make_weight(dt, s.n, s.k, *layout, seed++);
        const TensorView gw = upload_weight(twin, w);
        for (const std::int64_t m : {1, 3, 12}) {
          const std::int64_t ldx = s.k + layout->ldx_extra, ldy = s.n + layout->ldy_extra;
          auto x = make_x(m, s.k, ldx, seed++);
          const auto bias = random_floats(static_cast<std::size_t>(s.n), seed++, 0.5f);
          const TensorView gx = twin.upload(x, DType::kF32, {m, ldx}).slice_last(0, s.k);
          const TensorView gy = twin.empty(static_cast<std::size_t>(m * ldy) * 4, DType::kF32, {m, ldy});
          const TensorView gb = layout->bias ? twin.upload(bias, DType::kF32, {s.n}) : TensorView{};
          twin.gpu().linear(gx, gw, gb, gy.slice_last(0, s.n));
          const auto y = twin.download<float>(gy, static_cast<std::size_t>(m * ldy));
          int mismatches = 0;
          for (std::int64_t r = 0; r < m; ++r) {
            for (std::int64_t c = 0; c < s.n; ++c) {
              const float want = reference_dot(&x[static_cast<std::size_t>(r * ldx)],
                                               &w.values[static_cast<std::size_t>(c * s.k)], s.k,
                                               layout->bias ? &bias[static_cast<std::size_t>(c)] : nullptr);
              const float got = y[static_cast<std::size_t>(r * ldy + c)];
              if (std::memcmp(&want, &got, 4) != 0 && ++mismatches <= 3) {
                ADD_FAILURE() << label("order", m, s, dt, *layout) << ": y[" << r << ", " << c << "] = " << got
                              << ", host replay " << want;
              }
            }
          }
          EXPECT_EQ(mismatches, 0) << label("order", m, s, dt, *layout);
        }
      }
    }
  }
}

TEST(CudaLinear, RowIsBitIdenticalAloneOrInAnyBatch) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 500;
  for (const Shape& s : {Shape{33, 77}, Shape{256, 1000}, Shape{70, 9001}}) {
    for (const DType dt : kDtypes) {
      const HostWeight w = make_weight(dt, s.n, s.k, kPadded, seed++);
      const TensorView gw = upload_weight(twin, w);
      // One row alone: a contiguous (16-byte aligned) x, so the batch's odd-strided rows and the
      // lone row even take different x staging paths.
      const TensorView gx1 = twin.empty(static_cast<std::size_t>(s.k) * 4, DType::kF32, {1, s.k}, 0);
      const TensorView gy1 = twin.empty(static_cast<std::size_t>(s.n) * 4, DType::kF32, {1, s.n});
      for (const std::int64_t m : {2, 5, 17, 64}) {
        const std::int64_t ldx = s.k + 1;
        const auto x = make_x(m, s.k, ldx, seed++);
        const TensorView gx = twin.upload(x, DType::kF32, {m, ldx}).slice_last(0, s.k);
        const TensorView gy = twin.empty(static_cast<std::size_t>(m * s.n) * 4, DType::kF32, {m, s.n});
        twin.gpu().linear(gx, gw, TensorView{}, gy);
        const auto batch = twin.download<float>(gy, static_cast<std::size_t>(m * s.n));
        for (std::int64_t r = 0; r < m; ++r) {
          twin.gpu().copy_to_device(gx1.data, &x[static_cast<std::size_t>(r * ldx)], static_cast<std::size_t>(s.k) * 4);
          twin.gpu().linear(gx1, gw, TensorView{}, gy1);
          const auto alone = twin.download<float>(gy1, static_cast<std::size_t>(s.n));
          EXPECT_EQ(std::memcmp(alone.data(), &batch[static_cast<std::size_t>(r * s.n)], alone.size() * 4), 0)
              << "row " << r << " of " << label("batch", m, s, dt, kPadded);
        }
      }
    }
  }
}

TEST(CudaLinear, CublasPathMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin(/*batch_invariant=*/false);
  std::uint32_t seed = 700;
  for (const Shape& s : {Shape{256, 1000}, Shape{33, 77}, Shape{4096, 512}}) {
    for (const DType dt : kDtypes) {
      const float tol = (dt == DType::kF32 ? kInvariantTol : dt == DType::kBF16 ? 1.0f / 64 : 1.0f / 256) * scale(s.k);
      for (const Layout* layout : {&kContiguous, &kUnaligned}) {
        const HostWeight w = make_weight(dt, s.n, s.k, *layout, seed++);
        const TensorView gw = upload_weight(twin, w);
        // 300 first, then 65 (just above the cuBLAS threshold), then 500 (the scratch grows).
        for (const std::int64_t m : {300, 65, 500}) {
          const Result r = run_linear(twin, m, w, gw, *layout, seed++);
          expect_close(r, tol, label("cublas", m, s, dt, *layout));
        }
      }
    }
  }
}


// A graph captured while the cuBLAS path's conversion scratch was small replays that scratch's
// address. When a later, larger call grows the scratch, the old block must stay the graph's: freed,
// the stream-ordered pool hands it to the next allocation, and every replay writes into someone
// else's memory. The "someone else" here is a block taken from the pool right after the growth.
TEST(CudaLinear, GraphsCapturedBeforeTheScratchGrowsReplayIntoMemoryTheyStillOwn) {
  SKIP_WITHOUT_GPU();
  Twin twin(/*batch_invariant=*/false);
  if (twin.cpu_stand_in()) GTEST_SKIP() << "graphs and the cuBLAS scratch are the GPU's";
  Backend& g = twin.gpu();
  const std::int64_t n = 256, k = 1024, small = 128, big = 8192;  // scratch: 256 KiB -> 16 MiB
  std::vector<std::uint16_t> w_host(static_cast<std::size_t>(n * k));
  const std::vector<float> w_values = random_floats(w_host.size(), 11, kWScale);
  for (std::size_t i = 0; i < w_host.size(); ++i) w_host[i] = f32_to_bf16(w_values[i]);
  const TensorView w = twin.upload(w_host, DType::kBF16, {n, k});
  const TensorView x_small = twin.upload(random_floats(static_cast<std::size_t>(small * k), 12, kXScale), DType::kF32, {small, k});
  const TensorView x_big = twin.upload(random_floats(static_cast<std::size_t>(big * k), 13, kXScale), DType::kF32, {big, k});
  const TensorView y_small = twin.empty(static_cast<std::size_t>(small * n) * 4, DType::kF32, {small, n});
  const TensorView y_big = twin.empty(static_cast<std::size_t>(big * n) * 4, DType::kF32, {big, n});

  g.linear(x_small, w, TensorView{}, y_small);  // eager first, as the engine does before capturing
  const std::vector<float> expected = twin.download<float>(y_small, static_cast<std::size_t>(small * n));
  ASSERT_TRUE(g.begin_capture().ok());
  g.linear(x_small, w, TensorView{}, y_small);
  auto graph = g.end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status();

  g.linear(x_big, w, TensorView{}, y_big);  // grows the scratch
  g.synchronize();
  constexpr std::size_t kOther = std::size_t{1} << 20;  // the size of the small scratch block
  void* other = nullptr;
  ASSERT_EQ(cudaMallocAsync(&other, kOther, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(other, 0x5a, kOther, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);

  const std::vector<float> nans(static_cast<std::size_t>(small * n), std::nanf(""));
  g.copy_to_device(y_small.data, nans.data(), nans.size() * sizeof(float));
  (*graph)->replay();
  const std::vector<float> replayed = twin.download<float>(y_small, nans.size());
  std::vector<unsigned char> other_bytes(kOther);
  ASSERT_EQ(cudaMemcpy(other_bytes.data(), other, kOther, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaFree(other), cudaSuccess);

  std::size_t clobbered = 0;
  for (const unsigned char b : other_bytes) clobbered += b != 0x5a;
  EXPECT_EQ(clobbered, 0u) << "the graph's replay wrote into memory the GEMM had given back";
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(replayed[i], expected[i], 1e-4f * (1.0f + std::fabs(expected[i]))) << "element " << i;
  }
}

}  // namespace
}  // namespace baton
