// Paged attention: float64 reference over varlen batches (GQA, sliding window, block tables that
// are not in order), bit-identical tiers, and batch invariance (each token computed alone gives the
// same bits as inside the batch, and however the work items are split); a BF16 cache gives the bits
// of an F32 cache holding the same rounded values.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/cpu/test_util.h"

namespace baton::cpu {
namespace {

using testing::random_floats;
using testing::same_bits;
using testing::supported_isas;

struct AttnCase {
  int num_heads, num_kv_heads, head_dim, block_size, window;
  std::vector<int> context_lens;  // per sequence, after this step
  std::vector<int> q_lens;        // new tokens per sequence
};

struct Data {
  AttnCase s;
  int num_blocks = 0, max_blocks = 0, tokens = 0;
  std::vector<float> cache, q;
  std::vector<std::int32_t> positions, token_seq, block_tables;
};

Data make_data(const AttnCase& s, std::uint32_t seed) {
  Data d;
  d.s = s;
  for (int c : s.context_lens) d.max_blocks = std::max(d.max_blocks, (c + s.block_size - 1) / s.block_size);
  d.num_blocks = d.max_blocks * static_cast<int>(s.context_lens.size()) + 3;
  // Every sequence gets distinct physical blocks in a shuffled order.
  std::vector<std::int32_t> ids(static_cast<std::size_t>(d.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  d.block_tables.assign(s.context_lens.size() * static_cast<std::size_t>(d.max_blocks), -1);
  std::size_t next = 0;
  for (std::size_t i = 0; i < s.context_lens.size(); ++i) {
    for (int b = 0; b < (s.context_lens[i] + s.block_size - 1) / s.block_size; ++b) {
      d.block_tables[i * static_cast<std::size_t>(d.max_blocks) + static_cast<std::size_t>(b)] = ids[next++];
    }
    for (int t = 0; t < s.q_lens[i]; ++t) {
      d.positions.push_back(s.context_lens[i] - s.q_lens[i] + t);
      d.token_seq.push_back(static_cast<std::int32_t>(i));
    }
  }
  d.tokens = static_cast<int>(d.positions.size());
  d.cache = random_floats(static_cast<std::size_t>(d.num_blocks) * 2 * static_cast<std::size_t>(s.block_size) *
                              static_cast<std::size_t>(s.num_kv_heads * s.head_dim),
                          seed + 1);
  d.q = random_floats(static_cast<std::size_t>(d.tokens * s.num_heads * s.head_dim), seed + 2);
  return d;
}

const float* kv_at(const Data& d, int seq, int pos, int kv, int head) {
  const AttnCase& s = d.s;
  const int block = d.block_tables[static_cast<std::size_t>(seq * d.max_blocks + pos / s.block_size)];
  const std::size_t row = static_cast<std::size_t>(s.num_kv_heads * s.head_dim);
  return d.cache.data() + ((static_cast<std::size_t>(block) * 2 + static_cast<std::size_t>(kv)) * s.block_size +
                           static_cast<std::size_t>(pos % s.block_size)) * row +
         static_cast<std::size_t>(head * s.head_dim);
}

std::vector<double> reference(const Data& d) {
  const AttnCase& s = d.s;
  const int group = s.num_heads / s.num_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  std::vector<double> out(d.q.size());
  for (int t = 0; t < d.tokens; ++t) {
    const int pos = d.positions[static_cast<std::size_t>(t)], seq = d.token_seq[static_cast<std::size_t>(t)];
    const int first = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
    for (int h = 0; h < s.num_heads; ++h) {
      const float* q = d.q.data() + static_cast<std::size_t>((t * s.num_heads + h) * s.head_dim);
      std::vector<double> w;
      for (int p = first; p <= pos; ++p) {
        const float* k = kv_at(d, seq, p, 0, h / group);
        double dot = 0;
        for (int i = 0; i < s.head_dim; ++i) dot += static_cast<double>(q[i]) * k[i];
        w.push_back(dot * scale);
      }
      const double mx = *std::max_element(w.begin(), w.end());
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (int i = 0; i < s.head_dim; ++i) {
        double acc = 0;
        for (int p = first; p <= pos; ++p) acc += w[static_cast<std::size_t>(p - first)] / sum * kv_at(d, seq, p, 1, h / group)[i];
        out[static_cast<std::size_t>((t * s.num_heads + h) * s.head_dim + i)] = acc;
      }
    }
  }
  return out;
}

// Runs the kernel for tokens [t_begin, t_end) of the batch, as if they were the whole batch.
// Items are run in two calls split at `split` (as two threads would) when split > 0. With
// bf16_cache, the kernel reads that BF16 cache (laid out as d.cache) instead of d.cache.
std::vector<float> run(const KernelTable& table, const Data& d, int t_begin, int t_end, std::int64_t split = 0,
                       const std::vector<std::uint16_t>* bf16_cache = nullptr) {
  const AttnCase& s = d.s;
  const int n = t_end - t_begin;
  std::vector<float> out(static_cast<std::size_t>(n * s.num_heads * s.head_dim), 0.0f);
  AttentionArgs a;
  a.q = d.q.data() + static_cast<std::size_t>(t_begin * s.num_heads * s.head_dim);
  a.q_stride = s.num_heads * s.head_dim;
  a.kv_cache = d.cache.data();
  if (bf16_cache != nullptr) {
    a.kv_cache = bf16_cache->data();
    a.kv_dtype = DType::kBF16;
  }
  a.positions = d.positions.data() + t_begin;
  a.token_seq = d.token_seq.data() + t_begin;
  a.block_tables = d.block_tables.data();
  a.block_table_stride = d.max_blocks;
  a.out = out.data();
  a.out_stride = s.num_heads * s.head_dim;
  a.num_heads = s.num_heads;
  a.num_kv_heads = s.num_kv_heads;
  a.head_dim = s.head_dim;
  a.block_size = s.block_size;
  a.sliding_window = s.window;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int max_ctx = *std::max_element(s.context_lens.begin(), s.context_lens.end());
  std::vector<float> scratch(static_cast<std::size_t>(attention_scratch_floats(s.num_heads, s.num_kv_heads, s.head_dim, max_ctx)));
  a.num_tokens = n;
  const std::int64_t items = attention_items(n, s.num_kv_heads);
  if (split > 0 && split < items) {
    table.attention(a, split, items, scratch.data());
    table.attention(a, 0, split, scratch.data());
  } else {
    table.attention(a, 0, items, scratch.data());
  }
  return out;
}

const AttnCase kSetups[] = {
    {4, 2, 18, 16, 0, {37, 21, 19, 1}, {5, 1, 19, 1}},  // decode, prefill, chunk; head_dim with a tail
    {8, 1, 64, 16, 0, {70}, {3}},                        // MQA, verification-sized chunk
    {6, 6, 32, 4, 0, {9, 30}, {9, 2}},                   // MHA, small blocks
    {4, 2, 20, 16, 8, {40, 12, 5}, {10, 12, 5}},         // sliding window 8
    // head_dim 128 (two register chunks of values on AVX-512), group 4, a verification run of 5 over
    // a long context, contexts of exactly 16 and 17 keys (whole and partial score chunks)
    {8, 2, 128, 16, 0, {300, 16, 17}, {5, 1, 1}},
    {4, 1, 96, 32, 0, {129, 33}, {1, 33}},  // head_dim 96, blocks of 32
    // MHA decode batch (kv heads paired per token, an odd count leaves one alone) with a prefill
    // chunk and a verification run beside it; head_dim 64, and 40 with a tail chunk
    {5, 5, 64, 16, 0, {40, 17, 33, 12}, {1, 1, 5, 12}},
    {3, 3, 40, 8, 0, {20, 9}, {1, 1}},
};

TEST(PagedAttention, MatchesFloat64Reference) {
  for (const AttnCase& s : kSetups) {
    const Data d = make_data(s, 7);
    const auto ref = reference(d);
    for (CpuIsa isa : supported_isas()) {
      const auto out = run(kernel_table_for(isa), d, 0, d.tokens);
      for (std::size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], ref[i], 2e-5) << isa_name(isa) << " heads " << s.num_heads << "/" << s.num_kv_heads
                                          << " window " << s.window << " at " << i;
      }
    }
  }
}

TEST(PagedAttention, TokenAloneIsBitIdenticalToTokenInBatch) {
  for (const AttnCase& s : kSetups) {
    const Data d = make_data(s, 9);
    const std::size_t per_token = static_cast<std::size_t>(s.num_heads * s.head_dim);
    for (CpuIsa isa : supported_isas()) {
      const auto batched = run(kernel_table_for(isa), d, 0, d.tokens);
      for (int t = 0; t < d.tokens; ++t) {
        const auto alone = run(kernel_table_for(isa), d, t, t + 1);
        const std::vector<float> slice(batched.begin() + static_cast<std::ptrdiff_t>(t * per_token),
                                       batched.begin() + static_cast<std::ptrdiff_t>((t + 1) * per_token));
        ASSERT_TRUE(same_bits(alone, slice)) << isa_name(isa) << " token " << t;
      }
    }
  }
}

TEST(PagedAttention, ItemSplitsDoNotChangeBits) {
  for (const AttnCase& s : kSetups) {
    const Data d = make_data(s, 10);
    const auto whole = run(kernel_table_for(CpuIsa::kPortable), d, 0, d.tokens);
    for (std::int64_t split = 1; split < attention_items(d.tokens, s.num_kv_heads); ++split) {
      EXPECT_TRUE(same_bits(run(kernel_table_for(CpuIsa::kPortable), d, 0, d.tokens, split), whole)) << split;
    }
  }
}

TEST(PagedAttention, TiersAreBitIdentical) {
  for (const AttnCase& s : kSetups) {
    const Data d = make_data(s, 11);
    const auto expected = run(kernel_table_for(CpuIsa::kPortable), d, 0, d.tokens);
    for (CpuIsa isa : supported_isas()) {
      EXPECT_TRUE(same_bits(run(kernel_table_for(isa), d, 0, d.tokens), expected)) << isa_name(isa);
    }
  }
}

// The cache rounded to BF16, and the same values widened back into an F32 Data.
std::vector<std::uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<std::uint16_t> out(x.size());
  std::transform(x.begin(), x.end(), out.begin(), f32_to_bf16);
  return out;
}
Data widened(const Data& d, const std::vector<std::uint16_t>& bf16) {
  Data w = d;
  std::transform(bf16.begin(), bf16.end(), w.cache.begin(), bf16_to_f32);
  return w;
}

TEST(PagedAttention, Bf16CacheGivesTheBitsOfItsValuesInF32) {
  for (const AttnCase& s : kSetups) {
    const Data d = make_data(s, 12);
    const auto bf16 = to_bf16(d.cache);
    const Data rounded = widened(d, bf16);
    ASSERT_NE(rounded.cache, d.cache) << "rounding to BF16 changed nothing: the test would not see a widening bug";
    for (CpuIsa isa : supported_isas()) {
      const KernelTable& table = kernel_table_for(isa);
      const auto expected = run(table, rounded, 0, rounded.tokens);
      EXPECT_TRUE(same_bits(run(table, d, 0, d.tokens, 0, &bf16), expected))
          << isa_name(isa) << " heads " << s.num_heads << "/" << s.num_kv_heads << " head_dim " << s.head_dim
          << " window " << s.window;
      // Split work items, as two threads take them, change no bit either.
      EXPECT_TRUE(same_bits(run(table, d, 0, d.tokens, 1, &bf16), expected)) << isa_name(isa);
    }
  }
}

// Sequence 0's keys and values of d as write_kv() takes them, with the slots they belong in.
struct KvRows {
  std::vector<float> k, v;
  std::vector<std::int32_t> slots;
};
KvRows kv_rows(const Data& d) {
  const AttnCase& s = d.s;
  const int row = s.num_kv_heads * s.head_dim;
  KvRows r;
  r.k.resize(static_cast<std::size_t>(d.tokens * row));
  r.v.resize(r.k.size());
  for (int t = 0; t < d.tokens; ++t) {
    std::copy_n(kv_at(d, 0, t, 0, 0), row, r.k.begin() + t * row);
    std::copy_n(kv_at(d, 0, t, 1, 0), row, r.v.begin() + t * row);
    r.slots.push_back(d.block_tables[static_cast<std::size_t>(t / s.block_size)] * s.block_size + t % s.block_size);
  }
  return r;
}

// write_kv() of d's sequence 0 into `cache` (laid out as d.cache, of `dtype`), through the backend.
void backend_write_kv(Backend& backend, const Data& d, void* cache, DType dtype) {
  const AttnCase& s = d.s;
  KvRows r = kv_rows(d);
  backend.write_kv(TensorView::contiguous(r.k.data(), DType::kF32, {d.tokens, s.num_kv_heads, s.head_dim}),
                   TensorView::contiguous(r.v.data(), DType::kF32, {d.tokens, s.num_kv_heads, s.head_dim}),
                   TensorView::contiguous(r.slots.data(), DType::kI32, {d.tokens}),
                   TensorView::contiguous(cache, dtype, {d.num_blocks, 2, s.block_size, s.num_kv_heads, s.head_dim}));
}

// paged_attention() of d's one sequence over `cache` (laid out as d.cache, of `dtype`), through the backend.
std::vector<float> backend_attention(Backend& backend, const Data& d, void* cache, DType dtype) {
  const AttnCase& s = d.s;
  std::vector<float> out(d.q.size());
  auto q = d.q;
  auto positions = d.positions;
  auto token_seq = d.token_seq;
  auto tables = d.block_tables;
  AttentionBatch batch;
  batch.positions = TensorView::contiguous(positions.data(), DType::kI32, {d.tokens});
  batch.token_seq = TensorView::contiguous(token_seq.data(), DType::kI32, {d.tokens});
  batch.block_tables = TensorView::contiguous(tables.data(), DType::kI32, {1, d.max_blocks});
  batch.num_tokens = d.tokens;
  batch.max_context_len = s.context_lens[0];
  backend.paged_attention(TensorView::contiguous(q.data(), DType::kF32, {d.tokens, s.num_heads, s.head_dim}),
                          TensorView::contiguous(cache, dtype, {d.num_blocks, 2, s.block_size, s.num_kv_heads, s.head_dim}),
                          batch, 1.0f / std::sqrt(static_cast<float>(s.head_dim)), 0,
                          TensorView::contiguous(out.data(), DType::kF32, {d.tokens, s.num_heads, s.head_dim}));
  return out;
}

std::unique_ptr<CpuBackend> two_thread_backend() {
  BackendOptions opts;
  opts.num_threads = 2;
  auto backend = CpuBackend::create(opts);
  BATON_CHECK(backend.ok(), backend.status().ToString());
  return std::move(*backend);
}

TEST(PagedAttention, BackendWriteKvThenAttendMatchesKernel) {
  // write_kv places keys/values where the attention kernel reads them: store a sequence's K/V
  // through the backend into an empty cache and compare with the pre-filled cache's result.
  const AttnCase s{4, 2, 16, 4, 0, {11}, {11}};
  const Data d = make_data(s, 13);
  auto backend = two_thread_backend();
  std::vector<float> cache(d.cache.size(), 0.0f);
  backend_write_kv(*backend, d, cache.data(), DType::kF32);
  EXPECT_TRUE(same_bits(backend_attention(*backend, d, cache.data(), DType::kF32), run(backend->kernels(), d, 0, d.tokens)));
}

TEST(PagedAttention, BackendWritesBf16KvRoundedToNearestEven) {
  const AttnCase s{4, 2, 16, 4, 0, {11}, {11}};
  Data d = make_data(s, 14);
  // The first key's first two values exactly halfway between two BF16 numbers: ties go to the even.
  const std::size_t first = static_cast<std::size_t>(kv_at(d, 0, 0, 0, 0) - d.cache.data());
  d.cache[first] = std::bit_cast<float>(0x3f808000u);      // between 0x3f80 and 0x3f81 -> 0x3f80
  d.cache[first + 1] = std::bit_cast<float>(0x3f818000u);  // between 0x3f81 and 0x3f82 -> 0x3f82
  auto backend = two_thread_backend();
  ASSERT_TRUE(backend->supports_kv_cache_dtype(DType::kBF16));
  std::vector<std::uint16_t> cache(d.cache.size(), 0);
  backend_write_kv(*backend, d, cache.data(), DType::kBF16);
  // What the kernel should find: the written positions rounded, the rest untouched (zero).
  Data written = d;
  std::fill(written.cache.begin(), written.cache.end(), 0.0f);
  const int row = s.num_kv_heads * s.head_dim;
  for (int t = 0; t < d.tokens; ++t) {
    for (int kv = 0; kv < 2; ++kv) {
      const float* src = kv_at(d, 0, t, kv, 0);
      std::copy_n(src, row, written.cache.begin() + (src - d.cache.data()));
    }
  }
  const auto expected = to_bf16(written.cache);
  EXPECT_EQ(cache, expected);
  EXPECT_EQ(cache[first], 0x3f80) << "a tie rounds to even";
  EXPECT_EQ(cache[first + 1], 0x3f82) << "a tie rounds to even";
  // And attention over it is the kernel's over those values.
  EXPECT_TRUE(same_bits(backend_attention(*backend, d, cache.data(), DType::kBF16),
                        run(backend->kernels(), widened(written, expected), 0, d.tokens)));
}

}  // namespace
}  // namespace baton::cpu
