// The CUDA write_kv and paged_attention against the CPU backend: decode batches with short and long
// contexts, varlen and chunked prefill, (k+1)-token verification and mixed batches, over block
// sizes, GQA ratios, head dims, sliding windows and shuffled block tables, with strided q/k/v/out
// views; and batch invariance (a sequence or a token computed alone gives the same bits as inside a
// larger mixed batch). The same for a BF16 cache: write_kv rounds exactly as the CPU does, and
// attention over a BF16 cache gives the bits of attention over its values widened to an F32 cache.
// Skipped without a GPU.
//
// Tolerance of attention against the CPU: |gpu - cpu| <= 2e-5 + 1e-4 * |cpu|. Both are F32 with F32
// accumulation but round differently: the dot products sum in another order (an error of a few ulp
// of |q|·|k| ~ 1e-6 on a score of ~1), the GPU's expf is not the CPU's polynomial, and the GPU
// normalises once at the end of an online softmax instead of before the weighted sum. Outputs are
// convex combinations of N(0, 1) values (|out| < ~4), so these differences stay around 1e-6; the
// slack covers sums over thousands of keys. A wrong mask or a wrong key moves an output by
// ~|v| / context >= 1e-4 even at 2000 keys, which the tolerance still catches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/cuda/twin_test_util.h"

namespace baton {
namespace {

using cuda_testing::expect_close;
using cuda_testing::random_floats;
using cuda_testing::Twin;

constexpr float kAtol = 2e-5f;
constexpr float kRtol = 1e-4f;

struct Case {
  int heads, kv_heads, head_dim, block_size, window;
  std::vector<int> context_lens;  // per sequence, including this step's tokens
  std::vector<int> q_lens;        // this step's tokens per sequence: the last q_lens of its context
};

std::string describe(const Case& c) {
  std::string s = "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " dim " +
                  std::to_string(c.head_dim) + " block " + std::to_string(c.block_size) + " window " +
                  std::to_string(c.window) + " seqs";
  for (std::size_t i = 0; i < c.context_lens.size(); ++i) {
    s += " " + std::to_string(c.q_lens[i]) + "/" + std::to_string(c.context_lens[i]);
  }
  return s;
}

// One attention call's host inputs.
struct Step {
  std::vector<float> q;  // [tokens, heads, head_dim]
  std::vector<std::int32_t> positions, token_seq, block_tables;
  std::int64_t tokens = 0, num_seqs = 0, max_blocks = 0, max_context = 0;
};

// A KV cache layer full of random values (stale entries included) and a step over it; every
// sequence owns distinct physical blocks, dealt in a shuffled order; unused table entries are -1.
// With a BF16 cache, `cache` holds the BF16 values widened (each exactly representable).
struct AttnData {
  Case c;
  DType kv_dtype = DType::kF32;
  std::int64_t num_blocks = 0;
  std::vector<float> cache;  // [num_blocks, 2, block_size, kv_heads, head_dim]
  Step step;
};

std::vector<std::uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<std::uint16_t> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = f32_to_bf16(x[i]);
  return r;
}

std::vector<float> round_to_bf16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

AttnData make_setup(const Case& c, std::uint32_t seed, DType kv_dtype = DType::kF32) {
  AttnData s;
  s.c = c;
  s.kv_dtype = kv_dtype;
  Step& st = s.step;
  st.num_seqs = static_cast<std::int64_t>(c.context_lens.size());
  for (int len : c.context_lens) {
    st.max_blocks = std::max<std::int64_t>(st.max_blocks, (len + c.block_size - 1) / c.block_size);
  }
  s.num_blocks = st.max_blocks * st.num_seqs + 3;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(s.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  st.block_tables.assign(static_cast<std::size_t>(st.num_seqs * st.max_blocks), -1);
  std::size_t next = 0;
  for (std::size_t i = 0; i < c.context_lens.size(); ++i) {
    for (int b = 0; b < (c.context_lens[i] + c.block_size - 1) / c.block_size; ++b) {
      st.block_tables[i * static_cast<std::size_t>(st.max_blocks) + static_cast<std::size_t>(b)] = ids[next++];
    }
    for (int t = 0; t < c.q_lens[i]; ++t) {
      st.positions.push_back(c.context_lens[i] - c.q_lens[i] + t);
      st.token_seq.push_back(static_cast<std::int32_t>(i));
    }
    st.max_context = std::max<std::int64_t>(st.max_context, c.context_lens[i]);
  }
  st.tokens = static_cast<std::int64_t>(st.positions.size());
  s.cache = random_floats(static_cast<std::size_t>(s.num_blocks * 2 * c.block_size * c.kv_heads * c.head_dim),
                          seed + 1);
  if (kv_dtype == DType::kBF16) s.cache = round_to_bf16(s.cache);
  st.q = random_floats(static_cast<std::size_t>(st.tokens * c.heads * c.head_dim), seed + 2);
  return s;
}

// The step restricted to the tokens of sequence `seq` (its block table row alone), or to a single
// token of it when token >= 0.
Step select(const Case& c, const Step& all, int seq, std::int64_t token = -1) {
  Step s;
  s.num_seqs = 1;
  s.max_blocks = all.max_blocks;
  s.block_tables.assign(all.block_tables.begin() + seq * all.max_blocks,
                        all.block_tables.begin() + (seq + 1) * all.max_blocks);
  const std::int64_t row = static_cast<std::int64_t>(c.heads) * c.head_dim;
  for (std::int64_t t = 0; t < all.tokens; ++t) {
    if (all.token_seq[static_cast<std::size_t>(t)] != seq || (token >= 0 && t != token)) continue;
    s.positions.push_back(all.positions[static_cast<std::size_t>(t)]);
    s.token_seq.push_back(0);
    s.q.insert(s.q.end(), all.q.begin() + t * row, all.q.begin() + (t + 1) * row);
    s.max_context = std::max<std::int64_t>(s.max_context, all.positions[static_cast<std::size_t>(t)] + 1);
  }
  s.tokens = static_cast<std::int64_t>(s.positions.size());
  return s;
}

// The step with its sequences in reverse order (sequence i becomes n - 1 - i, block table rows and
// tokens reordered to match).
Step reverse_sequences(const Case& c, const Step& all) {
  Step r;
  r.num_seqs = all.num_seqs;
  r.max_blocks = all.max_blocks;
  r.max_context = all.max_context;
  for (std::int64_t seq = all.num_seqs - 1; seq >= 0; --seq) {
    const Step one = select(c, all, static_cast<int>(seq));
    r.q.insert(r.q.end(), one.q.begin(), one.q.end());
    r.positions.insert(r.positions.end(), one.positions.begin(), one.positions.end());
    r.token_seq.insert(r.token_seq.end(), one.positions.size(), static_cast<std::int32_t>(all.num_seqs - 1 - seq));
    r.block_tables.insert(r.block_tables.end(), one.block_tables.begin(), one.block_tables.end());
  }
  r.tokens = static_cast<std::int64_t>(r.positions.size());
  return r;
}

// A [tokens, heads, dim] F32 view with the given token and head strides (elements).
TensorView heads_view(void* data, Device device, std::int64_t tokens, std::int64_t heads, std::int64_t dim,
                      std::int64_t token_stride, std::int64_t head_stride) {
  TensorView v = TensorView::contiguous(data, DType::kF32, {tokens, heads, dim}, device);
  v.strides[0] = token_stride;
  v.strides[1] = head_stride;
  return v;
}

float scale_for(const Case& c) { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }

std::vector<float> cpu_attention(Twin& twin, const Case& c, const AttnData& setup, const Step& step) {
  std::vector<float> q = step.q, cache = setup.cache, out(step.q.size());
  std::vector<std::uint16_t> cache_bf16 = to_bf16(setup.cache);
  void* cache_data = setup.kv_dtype == DType::kBF16 ? static_cast<void*>(cache_bf16.data()) : cache.data();
  std::vector<std::int32_t> pos = step.positions, seq = step.token_seq, tables = step.block_tables;
  AttentionBatch b;
  b.positions = TensorView::contiguous(pos.data(), DType::kI32, {step.tokens});
  b.token_seq = TensorView::contiguous(seq.data(), DType::kI32, {step.tokens});
  b.block_tables = TensorView::contiguous(tables.data(), DType::kI32, {step.num_seqs, step.max_blocks});
  b.num_tokens = step.tokens;
  b.max_context_len = step.max_context;
  twin.cpu().paged_attention(TensorView::contiguous(q.data(), DType::kF32, {step.tokens, c.heads, c.head_dim}),
                             TensorView::contiguous(cache_data, setup.kv_dtype,
                                                    {setup.num_blocks, 2, c.block_size, c.kv_heads, c.head_dim}),
                             b, scale_for(c), c.window,
                             TensorView::contiguous(out.data(), DType::kF32, {step.tokens, c.heads, c.head_dim}));
  return out;
}

// paged_attention on the GPU over an uploaded cache. q goes up strided (heads head_dim + 2 floats
// apart, tokens padded further); out is written into a padded buffer filled with 0xff bytes whose
// padding must come back untouched. Returns out as contiguous [tokens, heads, head_dim].
std::vector<float> gpu_attention(Twin& twin, const Case& c, const TensorView& cache, const Step& step) {
  const std::int64_t tokens = step.tokens, heads = c.heads, dim = c.head_dim;
  // (The CPU standing in for the GPU takes only contiguous heads.)
  const std::int64_t q_head_stride = twin.cpu_stand_in() ? dim : dim + 2, q_token_stride = heads * q_head_stride + 6;
  std::vector<float> q_host(static_cast<std::size_t>(std::max<std::int64_t>(1, tokens * q_token_stride)), NAN);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t h = 0; h < heads; ++h) {
      std::copy_n(step.q.begin() + (t * heads + h) * dim, dim, q_host.begin() + t * q_token_stride + h * q_head_stride);
    }
  }
  const TensorView gq_buf = twin.upload(q_host, DType::kF32, {static_cast<std::int64_t>(q_host.size())});
  const TensorView gq = heads_view(gq_buf.data, gq_buf.device, tokens, heads, dim, q_token_stride, q_head_stride);
  const std::int64_t out_token_stride = heads * dim + 8;
  const std::size_t out_floats = static_cast<std::size_t>(std::max<std::int64_t>(1, tokens * out_token_stride));
  const TensorView gout_buf = twin.empty(out_floats * 4, DType::kF32, {static_cast<std::int64_t>(out_floats)});
  const TensorView gout = heads_view(gout_buf.data, gout_buf.device, tokens, heads, dim, out_token_stride, dim);
  AttentionBatch b;
  b.positions = twin.upload(step.positions, DType::kI32, {tokens});
  b.token_seq = twin.upload(step.token_seq, DType::kI32, {tokens});
  b.block_tables = twin.upload(step.block_tables, DType::kI32, {step.num_seqs, step.max_blocks});
  b.num_tokens = tokens;
  b.max_context_len = step.max_context;
  twin.gpu().paged_attention(gq, cache, b, scale_for(c), c.window, gout);

  const std::vector<float> raw = twin.download<float>(gout_buf, out_floats);
  std::vector<float> out(static_cast<std::size_t>(tokens * heads * dim));
  std::size_t touched_padding = 0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* row = raw.data() + t * out_token_stride;
    std::copy_n(row, heads * dim, out.begin() + t * heads * dim);
    for (std::int64_t i = heads * dim; i < out_token_stride; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, row + i, 4);
      touched_padding += bits != 0xffffffffu;
    }
  }
  EXPECT_EQ(touched_padding, 0u) << "paged_attention wrote outside its output rows";
  return out;
}

TensorView upload_cache(Twin& twin, const AttnData& s) {
  if (s.kv_dtype == DType::kBF16) {
    return twin.upload(to_bf16(s.cache), DType::kBF16, {s.num_blocks, 2, s.c.block_size, s.c.kv_heads, s.c.head_dim});
  }
  return twin.upload(s.cache, DType::kF32, {s.num_blocks, 2, s.c.block_size, s.c.kv_heads, s.c.head_dim});
}

bool same_bits(const std::vector<float>& a, const float* b, std::size_t n) {
  return a.size() == n && std::memcmp(a.data(), b, n * sizeof(float)) == 0;
}

void expect_matches_cpu(Twin& twin, const Case& c, std::uint32_t seed, DType kv_dtype = DType::kF32) {
  const AttnData s = make_setup(c, seed, kv_dtype);
  const TensorView cache = upload_cache(twin, s);
  expect_close(gpu_attention(twin, c, cache, s.step), cpu_attention(twin, c, s, s.step), kAtol, kRtol,
               describe(c) + " kv " + std::string(dtype_name(kv_dtype)));
}

// ---- write_kv -------------------------------------------------------------------------------------

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
      const std::vector<std::uint16_t> initial_bf16 = to_bf16(initial);

      const TensorView gqkv = twin.upload(qkv, DType::kF32, {tokens, width});
      const TensorView gk = gqkv.slice_last(sh.heads * dim, (sh.heads + kv) * dim).split_last(kv);
      const TensorView gv = gqkv.slice_last((sh.heads + kv) * dim, width).split_last(kv);
      const TensorView gslots = twin.upload(slots, DType::kI32, {tokens});
      const TensorView gcache = kv_dtype == DType::kBF16
                                    ? twin.upload(initial_bf16, kv_dtype, {num_blocks, 2, bs, kv, dim})
                                    : twin.upload(initial, kv_dtype, {num_blocks, 2, bs, kv, dim});
      twin.gpu().write_kv(gk, gv, gslots, gcache);

      std::vector<float> k(static_cast<std::size_t>(tokens * kv * dim)), v(k.size());
      for (std::int64_t t = 0; t < tokens; ++t) {
        std::copy_n(qkv.begin() + t * width + sh.heads * dim, kv * dim, k.begin() + t * kv * dim);
        std::copy_n(qkv.begin() + t * width + (sh.heads + kv) * dim, kv * dim, v.begin() + t * kv * dim);
      }
      std::vector<float> cache = initial;
      std::vector<std::uint16_t> cache_bf16 = initial_bf16;
      void* cache_data = kv_dtype == DType::kBF16 ? static_cast<void*>(cache_bf16.data()) : cache.data();
      std::vector<std::int32_t> cslots = slots;
      twin.cpu().write_kv(TensorView::contiguous(k.data(), DType::kF32, {tokens, kv, dim}),
                          TensorView::contiguous(v.data(), DType::kF32, {tokens, kv, dim}),
                          TensorView::contiguous(cslots.data(), DType::kI32, {tokens}),
                          TensorView::contiguous(cache_data, kv_dtype, {num_blocks, 2, bs, kv, dim}));
      const std::size_t bytes = cache.size() * dtype_size(kv_dtype);
      const std::vector<unsigned char> got = twin.download<unsigned char>(gcache, bytes);
      EXPECT_EQ(std::memcmp(got.data(), cache_data, bytes), 0)
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

// ---- paged attention against the CPU ---------------------------------------------------------------

const std::vector<int> kLongDecode = {1, 7, 100, 1000, 1100};

TEST(CudaAttention, DecodeBatchesMatchCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  const std::vector<int> ones(kLongDecode.size(), 1);
  std::uint32_t seed = 100;
  for (const int bs : {16, 32}) {
    for (const auto& [heads, kv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{32, 8}}) {
      for (const int dim : {64, 128}) expect_matches_cpu(twin, Case{heads, kv, dim, bs, 0, kLongDecode, ones}, ++seed);
    }
  }
}

TEST(CudaAttention, VarlenPrefillMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 200;
  for (const int bs : {16, 32}) {
    for (const auto& [heads, kv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{32, 8}}) {
      for (const int dim : {64, 128}) {
        // Fresh prompts of several lengths, and a chunk of a prompt whose prefix is cached.
        expect_matches_cpu(twin, Case{heads, kv, dim, bs, 0, {37, 100, 64, 300}, {37, 100, 64, 45}}, ++seed);
      }
    }
  }
}

TEST(CudaAttention, VerificationMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 300;
  for (const int bs : {16, 32}) {
    for (const auto& [heads, kv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{32, 8}}) {
      for (const int dim : {64, 128}) {
        // k + 1 = 5 queries appended to long contexts (one crossing a chunk boundary), next to a decode.
        expect_matches_cpu(twin, Case{heads, kv, dim, bs, 0, {1030, 1002, 70}, {5, 5, 1}}, ++seed);
      }
    }
  }
}

TEST(CudaAttention, SlidingWindowMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 400;
  for (const int bs : {16, 32}) {
    for (const int dim : {64, 128}) {
      for (const int window : {64, 7}) {
        expect_matches_cpu(twin, Case{8, 2, dim, bs, window, {1, 100, 1000, 150, 1030}, {1, 1, 1, 150, 5}}, ++seed);
      }
    }
  }
}

// Other head dims: 96 and 80 (vector path with idle lanes), 32, 256 (fewer rows per CTA), 18 (not a
// multiple of 4: scalar path); group sizes 1, 8 and 16 (more heads than one CTA takes).
TEST(CudaAttention, OtherHeadDimsAndGroupsMatchCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 500;
  const std::vector<int> ctx = {1, 33, 1029, 60, 200}, q = {1, 1, 5, 60, 17};
  for (const int dim : {96, 80, 32, 256, 18}) expect_matches_cpu(twin, Case{8, 2, dim, 16, 0, ctx, q}, ++seed);
  expect_matches_cpu(twin, Case{8, 2, 96, 32, 64, ctx, q}, ++seed);
  expect_matches_cpu(twin, Case{8, 1, 128, 16, 0, ctx, q}, ++seed);
  expect_matches_cpu(twin, Case{16, 1, 128, 16, 0, ctx, q}, ++seed);
  expect_matches_cpu(twin, Case{16, 1, 256, 32, 0, ctx, q}, ++seed);
  expect_matches_cpu(twin, Case{6, 6, 64, 7, 0, ctx, q}, ++seed);  // a block size that is no power of two
}

// ---- BF16 cache ----------------------------------------------------------------------------------

// Decode, varlen prefill, verification, sliding windows and the scalar path over a BF16 cache,
// against the CPU over the same BF16 cache.
TEST(CudaAttention, Bf16CacheMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 700;
  const std::vector<int> ones(kLongDecode.size(), 1);
  for (const int dim : {64, 128}) {
    expect_matches_cpu(twin, Case{32, 8, dim, 16, 0, kLongDecode, ones}, ++seed, DType::kBF16);
    expect_matches_cpu(twin, Case{8, 2, dim, 32, 0, {37, 100, 64, 300}, {37, 100, 64, 45}}, ++seed, DType::kBF16);
    expect_matches_cpu(twin, Case{8, 2, dim, 16, 0, {1030, 1002, 70}, {5, 5, 1}}, ++seed, DType::kBF16);
    expect_matches_cpu(twin, Case{8, 2, dim, 16, 64, {1, 100, 1000, 150, 1030}, {1, 1, 1, 150, 5}}, ++seed,
                       DType::kBF16);
  }
  const std::vector<int> ctx = {1, 33, 1029, 60, 200}, q = {1, 1, 5, 60, 17};
  for (const int dim : {96, 256, 18}) expect_matches_cpu(twin, Case{8, 2, dim, 16, 0, ctx, q}, ++seed, DType::kBF16);
}

// Widening a BF16 key or value is exact and the arithmetic after the load is the F32 cache's, so
// attention over a BF16 cache gives the bits of attention over an F32 cache of the same values.
TEST(CudaAttention, Bf16CacheGivesTheBitsOfItsValuesInF32) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 800;
  const std::vector<int> ctx = {1, 700, 40, 300, 1030, 33}, q = {1, 1, 40, 45, 5, 1};
  for (const int dim : {64, 128, 256, 18}) {
    const Case c{8, 2, dim, 16, 0, ctx, q};
    AttnData s = make_setup(c, ++seed, DType::kBF16);
    const std::vector<float> from_bf16 = gpu_attention(twin, c, upload_cache(twin, s), s.step);
    s.kv_dtype = DType::kF32;  // the same (representable) values, stored as F32
    const std::vector<float> from_f32 = gpu_attention(twin, c, upload_cache(twin, s), s.step);
    EXPECT_TRUE(same_bits(from_bf16, from_f32.data(), from_f32.size())) << describe(c);
  }
}

// ---- batch invariance ----------------------------------------------------------------------------

// A mixed batch (decodes, a fresh prompt, a prompt chunk, a verification) on the GPU; each sequence
// computed alone, and each token of a decode, a prompt and the verification alone, must give the
// same bits, and so must the batch in reverse sequence order.
void expect_batch_invariant(Twin& twin, const Case& c, std::uint32_t seed, DType kv_dtype) {
  const std::vector<int>& q = c.q_lens;
  const AttnData s = make_setup(c, seed, kv_dtype);
  const TensorView cache = upload_cache(twin, s);
  const std::vector<float> batched = gpu_attention(twin, c, cache, s.step);
  const std::size_t row = static_cast<std::size_t>(c.heads * c.head_dim);
  const std::string what = describe(c) + " kv " + std::string(dtype_name(kv_dtype));
  std::vector<std::size_t> starts;  // first token of each sequence in the batch
  for (std::size_t i = 0, at = 0; i < q.size(); at += static_cast<std::size_t>(q[i]), ++i) starts.push_back(at);
  for (int seq = 0; seq < static_cast<int>(q.size()); ++seq) {
    const std::size_t first = starts[static_cast<std::size_t>(seq)];
    const std::vector<float> alone = gpu_attention(twin, c, cache, select(c, s.step, seq));
    const std::size_t n = static_cast<std::size_t>(q[static_cast<std::size_t>(seq)]) * row;
    EXPECT_TRUE(same_bits(alone, batched.data() + first * row, n)) << what << ": sequence " << seq;
    if (seq == 1 || seq == 2 || seq == 4) {  // a decode, a prompt and the verification, token by token
      for (int t = 0; t < q[static_cast<std::size_t>(seq)]; ++t) {
        const auto token = static_cast<std::int64_t>(first) + t;
        EXPECT_TRUE(same_bits(gpu_attention(twin, c, cache, select(c, s.step, seq, token)),
                              batched.data() + (first + static_cast<std::size_t>(t)) * row, row))
            << what << ": token " << token;
      }
    }
  }
  // The batch in reverse sequence order: each sequence's rows keep their bits.
  const std::vector<float> reversed = gpu_attention(twin, c, cache, reverse_sequences(c, s.step));
  std::size_t at = 0;
  for (int seq = static_cast<int>(q.size()) - 1; seq >= 0; --seq) {
    const std::size_t n = static_cast<std::size_t>(q[static_cast<std::size_t>(seq)]) * row;
    const std::vector<float> part(reversed.begin() + static_cast<std::ptrdiff_t>(at),
                                  reversed.begin() + static_cast<std::ptrdiff_t>(at + n));
    EXPECT_TRUE(same_bits(part, batched.data() + starts[static_cast<std::size_t>(seq)] * row, n))
        << what << ": sequence " << seq << " in the reversed batch";
    at += n;
  }
}

TEST(CudaAttention, SequenceAloneIsBitIdenticalToSequenceInMixedBatch) {
  SKIP_WITHOUT_GPU();
  Twin twin;
  std::uint32_t seed = 600;
  const std::vector<int> ctx = {1, 700, 40, 300, 1030, 33}, q = {1, 1, 40, 45, 5, 1};
  for (const auto& [heads, kv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{32, 8}}) {
    for (const int dim : {64, 128}) {
      for (const int window : {0, 64}) {
        expect_batch_invariant(twin, Case{heads, kv, dim, 16, window, ctx, q}, ++seed, DType::kF32);
      }
    }
  }
  for (const int dim : {64, 128}) {
    for (const int window : {0, 64}) {
      expect_batch_invariant(twin, Case{8, 2, dim, 16, window, ctx, q}, ++seed, DType::kBF16);
    }
  }
}

}  // namespace
}  // namespace baton
