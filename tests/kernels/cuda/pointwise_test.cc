// The CUDA backend's row-wise and element-wise ops and rotary embedding against the CPU backend,
// over a sweep of shapes, strided views and weight dtypes. Skipped without a GPU.
#include <vector>

#include "kernels/dtype.h"
#include "tests/kernels/cuda/twin_test_util.h"

namespace baton {
namespace {

using cuda_testing::expect_close;
using cuda_testing::random_floats;
using cuda_testing::Twin;

TEST(CudaPointwise, EmbeddingWidensEveryTableDtype) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  const std::int64_t vocab = 300, hidden = 96;
  const std::vector<std::int32_t> ids = {0, 299, 17, 17, 150};
  const auto values = random_floats(static_cast<std::size_t>(vocab * hidden), 1);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<std::uint16_t> half(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) half[i] = dt == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
    const void* host_table = dt == DType::kF32 ? static_cast<const void*>(values.data()) : half.data();
    const TensorView table = dt == DType::kF32 ? twin.upload(values, dt, {vocab, hidden}) : twin.upload(half, dt, {vocab, hidden});
    const TensorView gids = twin.upload(ids, DType::kI32, {static_cast<std::int64_t>(ids.size())});
    const auto n = static_cast<std::int64_t>(ids.size());
    const TensorView out = twin.empty(static_cast<std::size_t>(n * hidden) * 4, DType::kF32, {n, hidden});
    twin.gpu().embedding(table, gids, out);
    std::vector<float> cpu(static_cast<std::size_t>(n * hidden));
    std::vector<std::int32_t> cids = ids;
    twin.cpu().embedding(TensorView::contiguous(const_cast<void*>(host_table), dt, {vocab, hidden}),
                         TensorView::contiguous(cids.data(), DType::kI32, {n}),
                         TensorView::contiguous(cpu.data(), DType::kF32, {n, hidden}));
    expect_close(twin.download<float>(out, cpu.size()), cpu, 0, 0, std::string(dtype_name(dt)));
  }
}

TEST(CudaPointwise, RmsNormRowsAndStridedHeadsInPlace) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  for (const std::int64_t dim : {64, 128, 1000, 4096}) {
    for (const std::int64_t rows : {1, 5, 33}) {
      auto x = random_floats(static_cast<std::size_t>(rows * dim), 2, 3.0f);
      const auto w = random_floats(static_cast<std::size_t>(dim), 3);
      const TensorView gx = twin.upload(x, DType::kF32, {rows, dim});
      const TensorView gw = twin.upload(w, DType::kF32, {dim});
      const TensorView gout = twin.empty(x.size() * 4, DType::kF32, {rows, dim});
      twin.gpu().rms_norm(gx, gw, 1e-6f, gout);
      std::vector<float> cpu(x.size());
      auto wc = w;
      twin.cpu().rms_norm(TensorView::contiguous(x.data(), DType::kF32, {rows, dim}),
                          TensorView::contiguous(wc.data(), DType::kF32, {dim}), 1e-6f,
                          TensorView::contiguous(cpu.data(), DType::kF32, {rows, dim}));
      expect_close(twin.download<float>(gout, cpu.size()), cpu, 1e-6f, 2e-6f, "rms_norm " + std::to_string(dim));
    }
  }
  // Per-head norm (QK-norm) on a strided [tokens, heads, head_dim] slice of a wider row, in place.
  const std::int64_t tokens = 7, heads = 4, hd = 64, width = 3 * heads * hd;
  auto qkv = random_floats(static_cast<std::size_t>(tokens * width), 4, 2.0f);
  const auto w = random_floats(static_cast<std::size_t>(hd), 5);
  const TensorView g = twin.upload(qkv, DType::kF32, {tokens, width});
  const TensorView gw = twin.upload(w, DType::kF32, {hd});
  const TensorView gheads = g.slice_last(heads * hd, 2 * heads * hd).split_last(heads);
  twin.gpu().rms_norm(gheads, gw, 1e-5f, gheads);
  auto wc = w;
  const TensorView c = TensorView::contiguous(qkv.data(), DType::kF32, {tokens, width});
  const TensorView cheads = c.slice_last(heads * hd, 2 * heads * hd).split_last(heads);
  twin.cpu().rms_norm(cheads, TensorView::contiguous(wc.data(), DType::kF32, {hd}), 1e-5f, cheads);
  expect_close(twin.download<float>(g, qkv.size()), qkv, 1e-6f, 2e-6f, "strided heads");
}

TEST(CudaPointwise, SiluMulAddSiluAddGatherCopy) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  const std::int64_t rows = 9, inter = 700;
  auto gate_up = random_floats(static_cast<std::size_t>(rows * 2 * inter), 6, 4.0f);
  const TensorView g_gu = twin.upload(gate_up, DType::kF32, {rows, 2 * inter});
  const TensorView g_act = twin.empty(static_cast<std::size_t>(rows * inter) * 4, DType::kF32, {rows, inter});
  twin.gpu().silu_mul(g_gu, g_act);
  std::vector<float> act(static_cast<std::size_t>(rows * inter));
  twin.cpu().silu_mul(TensorView::contiguous(gate_up.data(), DType::kF32, {rows, 2 * inter}),
                      TensorView::contiguous(act.data(), DType::kF32, {rows, inter}));
  expect_close(twin.download<float>(g_act, act.size()), act, 1e-6f, 1e-6f, "silu_mul");

  // add in place (out aliases a), on the left halves of the gate_up rows (strided).
  auto a = gate_up;
  const auto b = random_floats(static_cast<std::size_t>(rows * inter), 7);
  const TensorView ga = twin.upload(a, DType::kF32, {rows, 2 * inter}).slice_last(0, inter);
  const TensorView gb = twin.upload(b, DType::kF32, {rows, inter});
  twin.gpu().add(ga, gb, ga);
  auto bc = b;
  const TensorView ca = TensorView::contiguous(a.data(), DType::kF32, {rows, 2 * inter}).slice_last(0, inter);
  twin.cpu().add(ca, TensorView::contiguous(bc.data(), DType::kF32, {rows, inter}), ca);
  std::vector<float> got(a.size());
  twin.gpu().copy_to_host(got.data(), ga.data, got.size() * 4);
  expect_close(got, a, 0, 0, "add");

  // silu_add in place (out aliases the residual).
  const auto sx = random_floats(static_cast<std::size_t>(rows * inter), 8, 6.0f);
  auto sres = random_floats(static_cast<std::size_t>(rows * inter), 9);
  const TensorView gsx = twin.upload(sx, DType::kF32, {rows, inter});
  const TensorView gsres = twin.upload(sres, DType::kF32, {rows, inter});
  twin.gpu().silu_add(gsx, gsres, gsres);
  auto sxc = sx;
  const TensorView csres = TensorView::contiguous(sres.data(), DType::kF32, {rows, inter});
  twin.cpu().silu_add(TensorView::contiguous(sxc.data(), DType::kF32, {rows, inter}), csres, csres);
  expect_close(twin.download<float>(gsres, sres.size()), sres, 1e-6f, 1e-6f, "silu_add");

  const std::vector<std::int32_t> idx = {8, 0, 3, 3};
  const TensorView gidx = twin.upload(idx, DType::kI32, {4});
  const TensorView gsel = twin.empty(4 * static_cast<std::size_t>(inter) * 4, DType::kF32, {4, inter});
  twin.gpu().gather_rows(gb, gidx, gsel);
  std::vector<float> sel(4 * static_cast<std::size_t>(inter));
  auto idxc = idx;
  twin.cpu().gather_rows(TensorView::contiguous(bc.data(), DType::kF32, {rows, inter}),
                         TensorView::contiguous(idxc.data(), DType::kI32, {4}),
                         TensorView::contiguous(sel.data(), DType::kF32, {4, inter}));
  expect_close(twin.download<float>(gsel, sel.size()), sel, 0, 0, "gather_rows");

  // copy from a strided view into a contiguous one.
  const TensorView gcopy = twin.empty(static_cast<std::size_t>(rows * inter) * 4, DType::kF32, {rows, inter});
  twin.gpu().copy(g_gu.slice_last(inter, 2 * inter), gcopy);
  std::vector<float> want(static_cast<std::size_t>(rows * inter));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < inter; ++i) want[static_cast<std::size_t>(r * inter + i)] = gate_up[static_cast<std::size_t>(r * 2 * inter + inter + i)];
  }
  expect_close(twin.download<float>(gcopy, want.size()), want, 0, 0, "copy");
}

TEST(CudaPointwise, RopeTableAndRotationMatchCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  for (const std::int64_t hd : {64, 128}) {
    const std::int64_t tokens = 11, heads = 6, half = hd / 2;
    std::vector<std::int32_t> pos(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) pos[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t * 997 % 130000);
    std::vector<float> inv(static_cast<std::size_t>(half));
    for (std::int64_t i = 0; i < half; ++i) inv[static_cast<std::size_t>(i)] = std::pow(500000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(hd));
    const TensorView gpos = twin.upload(pos, DType::kI32, {tokens});
    const TensorView ginv = twin.upload(inv, DType::kF32, {half});
    const TensorView gcs = twin.empty(static_cast<std::size_t>(tokens * hd) * 4, DType::kF32, {tokens, hd});
    twin.gpu().rope_cos_sin(gpos, ginv, gcs);
    std::vector<float> cs(static_cast<std::size_t>(tokens * hd));
    twin.cpu().rope_cos_sin(TensorView::contiguous(pos.data(), DType::kI32, {tokens}),
                            TensorView::contiguous(inv.data(), DType::kF32, {half}),
                            TensorView::contiguous(cs.data(), DType::kF32, {tokens, hd}));
    expect_close(twin.download<float>(gcs, cs.size()), cs, 1e-7f, 0, "rope_cos_sin");

    // Rotate the K part of a fused qkv row (strided heads), from the CPU's table on both sides.
    const std::int64_t width = 3 * heads * hd;
    auto qkv = random_floats(static_cast<std::size_t>(tokens * width), 8);
    const TensorView g = twin.upload(qkv, DType::kF32, {tokens, width});
    const TensorView gtable = twin.upload(cs, DType::kF32, {tokens, hd});
    twin.gpu().apply_rope(g.slice_last(heads * hd, 2 * heads * hd).split_last(heads), gtable);
    twin.cpu().apply_rope(TensorView::contiguous(qkv.data(), DType::kF32, {tokens, width})
                              .slice_last(heads * hd, 2 * heads * hd)
                              .split_last(heads),
                          TensorView::contiguous(cs.data(), DType::kF32, {tokens, hd}));
    expect_close(twin.download<float>(g, qkv.size()), qkv, 0, 0, "apply_rope");
  }
}

}  // namespace
}  // namespace baton
