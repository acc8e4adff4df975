// The CUDA write_kv against the CPU backend's, bit for bit, for F32 and BF16 caches, and write_kv
// then paged_attention on each backend: the kernels agree on where a token's key and value live.
// Skipped without a GPU.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/cuda/attention_twin.h"

namespace baton::cuda_testing {
namespace {

// New keys/values go into random slots (some skipped with -1) of a cache that already holds random
// values; the GPU reads k and v as strided slices of a fused qkv row. The caches must match exactly:
// an F32 cache holds the rows' bits, a BF16 cache the CPU's rounding of them (ties to even, NaN kept
// quiet, overflow to infinity; the keys of the first token are such edge cases).
TEST(CudaAttention, WriteKvMatchesCpuExactly) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  struct Shape {
    int kv_heads, head_dim, block_size, heads;
  };
  const std::uint32_t kEdges[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f80c000u, 0x7f7fffffu, 0xff7fffffu,
                                  0x7fc00001u, 0xffa00000u, 0x7f800000u, 0x00000001u, 0x80000000u, 0x3f807fffu};
  for (const DType kv_dtype : {DType::kF32, DType::kBF16}) {
    // head_dim 18: the scalar path (no vector rows); the others the vector path.
    for (const Shape sh : {Shape{2, 64, 16, 8}, Shape{8, 128, 32, 32}, Shape{4, 96, 16, 4}, Shape{2, 18, 16, 2}}) {
      const std::int64_t tokens = 37, num_blocks = 9, kv = sh.kv_heads, dim = sh.head_dim, bs = sh.block_size;
      const std::int64_t width = (sh.heads + 2 * kv) * dim;  // fused [q | k | v] rows
      std::vector<std::int32_t> slots(static_cast<std::size_t>(num_blocks * bs));
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), std::mt19937(5));
      slots.resize(static_cast<std::size_t>(tokens));
      slots[3] = -1;
      slots[20] = -7;
      auto qkv = random_floats(static_cast<std::size_t>(tokens * width), 6);
      for (std::size_t i = 0; i < std::size(kEdges); ++i) {
        std::memcpy(&qkv[static_cast<std::size_t>(sh.heads * dim) + i], &kEdges[i], 4);
      }
      const auto initial = random_floats(static_cast<std::size_t>(num_blocks * 2 * bs * kv * dim), 7);
      std::vector<float> rounded;
      const std::vector<std::uint8_t> initial_bytes = encode(initial, kv_dtype, &rounded);  // the cache's dtype

      const TensorView gqkv = twin.upload(qkv, DType::kF32, {tokens, width});
      const TensorView gk = gqkv.slice_last(sh.heads * dim, (sh.heads + kv) * dim).split_last(kv);
      const TensorView gv = gqkv.slice_last((sh.heads + kv) * dim, width).split_last(kv);
      const TensorView gslots = twin.upload(slots, DType::kI32, {tokens});
      const TensorView gcache = twin.upload(initial_bytes, kv_dtype, {num_blocks, 2, bs, kv, dim});
      twin.gpu().write_kv(gk, gv, gslots, gcache);

      std::vector<float> k(static_cast<std::size_t>(tokens * kv * dim)), v(k.size());
      for (std::int64_t t = 0; t < tokens; ++t) {
        std::copy_n(qkv.begin() + t * width + sh.heads * dim, kv * dim, k.begin() + t * kv * dim);
        std::copy_n(qkv.begin() + t * width + (sh.heads + kv) * dim, kv * dim, v.begin() + t * kv * dim);
      }
      std::vector<std::uint8_t> cache = initial_bytes;
      std::vector<std::int32_t> cslots = slots;
      twin.cpu().write_kv(TensorView::contiguous(k.data(), DType::kF32, {tokens, kv, dim}),
                          TensorView::contiguous(v.data(), DType::kF32, {tokens, kv, dim}),
                          TensorView::contiguous(cslots.data(), DType::kI32, {tokens}),
                          TensorView::contiguous(cache.data(), kv_dtype, {num_blocks, 2, bs, kv, dim}));
      const std::vector<std::uint8_t> got = twin.download<std::uint8_t>(gcache, cache.size());
      EXPECT_EQ(std::memcmp(got.data(), cache.data(), cache.size()), 0)
          << "write_kv head_dim " << dim << " cache " << dtype_name(kv_dtype);
    }
  }
}

// write_kv then paged_attention on each backend from the same empty-ish cache: the kernels agree on
// where a token's key and value live. Also: zero-token calls are no-ops.
TEST(CudaAttention, WriteKvThenAttendMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  const Case c{8, 2, 64, 16, 0, {45, 3}, {45, 3}};
  AttnData s = make_setup(c, 21);
  const std::int64_t kv = c.kv_heads, dim = c.head_dim, tokens = s.step.tokens;
  std::vector<std::int32_t> slots;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const int seq = s.step.token_seq[static_cast<std::size_t>(t)], pos = s.step.positions[static_cast<std::size_t>(t)];
    slots.push_back(s.step.block_tables[static_cast<std::size_t>(seq * s.step.max_blocks + pos / c.block_size)] *
                        c.block_size + pos % c.block_size);
  }
  const auto k = random_floats(static_cast<std::size_t>(tokens * kv * dim), 22);
  const auto v = random_floats(k.size(), 23);
  const TensorView gcache = upload_cache(twin, s);
  twin.gpu().write_kv(twin.upload(k, DType::kF32, {tokens, kv, dim}), twin.upload(v, DType::kF32, {tokens, kv, dim}),
                      twin.upload(slots, DType::kI32, {tokens}), gcache);
  {
    std::vector<float> kc = k, vc = v;
    std::vector<std::int32_t> sc = slots;
    twin.cpu().write_kv(TensorView::contiguous(kc.data(), DType::kF32, {tokens, kv, dim}),
                        TensorView::contiguous(vc.data(), DType::kF32, {tokens, kv, dim}),
                        TensorView::contiguous(sc.data(), DType::kI32, {tokens}),
                        TensorView::contiguous(s.cache.data(), DType::kF32, {s.num_blocks, 2, c.block_size, kv, dim}));
  }
  expect_close(gpu_attention(twin, c, gcache, s.step), cpu_attention(twin, c, s, s.step), kAtol, kRtol,
               "write then attend");

  // Zero tokens: nothing to do, no error, cache unchanged.
  const std::vector<float> before = twin.download<float>(gcache, s.cache.size());
  const std::vector<float> none(1, 0.0f);
  const std::vector<std::int32_t> no_ids(1, 0);
  const TensorView gnone = twin.upload(none, DType::kF32, {1});
  const TensorView empty_heads = heads_view(gnone.data, gnone.device, 0, kv, dim, kv * dim, dim);
  twin.gpu().write_kv(empty_heads, empty_heads, twin.upload(no_ids, DType::kI32, {0}), gcache);
  Step empty;
  empty.num_seqs = 1;
  empty.max_blocks = 1;
  empty.block_tables = {0};
  EXPECT_TRUE(gpu_attention(twin, c, gcache, empty).empty());
  twin.gpu().synchronize();
  EXPECT_TRUE(same_bits(twin.download<float>(gcache, s.cache.size()), before.data(), before.size()));
}

}  // namespace
}  // namespace baton::cuda_testing
