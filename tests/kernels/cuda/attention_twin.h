// The CUDA attention kernels' tests against their CPU twin (attention_test.cc, kv_write_test.cc):
// random paged KV caches with shuffled block tables, the steps over them (decode, prefill chunks,
// verification, mixed), and both backends' write_kv and paged_attention on the same data, the
// GPU's with strided q/out views whose padding must stay untouched. A BF16 cache holds the random
// values rounded as write_kv rounds them, so both backends read the same keys and values.
//
// Tolerance of attention against the CPU: |gpu - cpu| <= 2e-5 + 1e-4 * |cpu|. Both are F32 with F32
// accumulation but round differently: the dot products sum in another order (an error of a few ulp
// of |q|·|k| ~ 1e-6 on a score of ~1), the GPU's expf is not the CPU's polynomial, and the GPU
// normalises once at the end of an online softmax instead of before the weighted sum. Outputs are
// convex combinations of N(0, 1) values (|out| < ~4), so these differences stay around 1e-6; the
// slack covers sums over thousands of keys. A wrong mask or a wrong key moves an output by
// ~|v| / context >= 1e-4 even at 2000 keys, which the tolerance still catches.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/cuda/twin_test_util.h"

namespace baton::cuda_testing {

using cpu::testing::encode;

inline constexpr float kAtol = 2e-5f;
inline constexpr float kRtol = 1e-4f;

struct Case {
  int heads, kv_heads, head_dim, block_size, window;
  std::vector<int> context_lens;  // per sequence, including this step's tokens
  std::vector<int> q_lens;        // this step's tokens per sequence: the last q_lens of its context
};

inline std::string describe(const Case& c) {
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

inline AttnData make_setup(const Case& c, std::uint32_t seed, DType kv_dtype = DType::kF32) {
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
  std::vector<float> rounded;
  encode(s.cache, kv_dtype, &rounded);
  s.cache = rounded;
  st.q = random_floats(static_cast<std::size_t>(st.tokens * c.heads * c.head_dim), seed + 2);
  return s;
}

// The step restricted to the tokens of sequence `seq` (its block table row alone), or to a single
// token of it when token >= 0.
inline Step select(const Case& c, const Step& all, int seq, std::int64_t token = -1) {
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
inline Step reverse_sequences(const Case& c, const Step& all) {
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
inline TensorView heads_view(void* data, Device device, std::int64_t tokens, std::int64_t heads, std::int64_t dim,
                      std::int64_t token_stride, std::int64_t head_stride) {
  TensorView v = TensorView::contiguous(data, DType::kF32, {tokens, heads, dim}, device);
  v.strides[0] = token_stride;
  v.strides[1] = head_stride;
  return v;
}

inline float scale_for(const Case& c) { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }

inline std::vector<float> cpu_attention(Twin& twin, const Case& c, const AttnData& setup, const Step& step) {
  std::vector<float> q = step.q, out(step.q.size()), rounded;
  std::vector<std::uint8_t> cache = encode(setup.cache, setup.kv_dtype, &rounded);
  std::vector<std::int32_t> pos = step.positions, seq = step.token_seq, tables = step.block_tables;
  AttentionBatch b;
  b.positions = TensorView::contiguous(pos.data(), DType::kI32, {step.tokens});
  b.token_seq = TensorView::contiguous(seq.data(), DType::kI32, {step.tokens});
  b.block_tables = TensorView::contiguous(tables.data(), DType::kI32, {step.num_seqs, step.max_blocks});
  b.num_tokens = step.tokens;
  b.max_context_len = step.max_context;
  twin.cpu().paged_attention(TensorView::contiguous(q.data(), DType::kF32, {step.tokens, c.heads, c.head_dim}),
                             TensorView::contiguous(cache.data(), setup.kv_dtype,
                                                    {setup.num_blocks, 2, c.block_size, c.kv_heads, c.head_dim}),
                             b, scale_for(c), c.window,
                             TensorView::contiguous(out.data(), DType::kF32, {step.tokens, c.heads, c.head_dim}));
  return out;
}

// paged_attention on the GPU over an uploaded cache. q goes up strided (heads head_dim + 2 floats
// apart, tokens padded further); out is written into a padded buffer filled with 0xff bytes whose
// padding must come back untouched. Returns out as contiguous [tokens, heads, head_dim].
inline std::vector<float> gpu_attention(Twin& twin, const Case& c, const TensorView& cache, const Step& step) {
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

inline TensorView upload_cache(Twin& twin, const AttnData& s) {
  std::vector<float> rounded;
  return twin.upload(encode(s.cache, s.kv_dtype, &rounded), s.kv_dtype,
                     {s.num_blocks, 2, s.c.block_size, s.c.kv_heads, s.c.head_dim});
}

inline bool same_bits(const std::vector<float>& a, const float* b, std::size_t n) {
  return a.size() == n && std::memcmp(a.data(), b, n * sizeof(float)) == 0;
}

inline void expect_matches_cpu(Twin& twin, const Case& c, std::uint32_t seed, DType kv_dtype = DType::kF32) {
  const AttnData s = make_setup(c, seed, kv_dtype);
  const TensorView cache = upload_cache(twin, s);
  expect_close(gpu_attention(twin, c, cache, s.step), cpu_attention(twin, c, s, s.step), kAtol, kRtol,
               describe(c) + " kv " + std::string(dtype_name(kv_dtype)));
}

}  // namespace baton::cuda_testing
