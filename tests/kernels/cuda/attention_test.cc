// The CUDA paged_attention against the CPU backend: decode batches with short and long contexts,
// varlen and chunked prefill, (k+1)-token verification and mixed batches, over block sizes, GQA
// ratios, head dims, sliding windows and shuffled block tables, with strided q/out views (cases
// and tolerance: attention_twin.h); and batch invariance (a sequence or a token computed alone
// gives the same bits as inside a larger mixed batch). The same over a BF16 cache, whose attention
// also gives the bits of attention over its values widened to an F32 cache. Skipped without a GPU.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/cuda/attention_twin.h"

namespace baton::cuda_testing {
namespace {

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
}  // namespace baton::cuda_testing
