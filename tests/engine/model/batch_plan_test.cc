// BatchPlan's upload from staging memory, against a backend whose copies from staging memory run
// later, as a GPU's DMA does (the CUDA backend cannot run here): each forward's device metadata
// must be that forward's, although the host packs the next one before the last copy has run.
#include "engine/model/batch_plan.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "common/status.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

// Device memory is host memory; a copy_to_device() from staging memory is queued and reads its
// source only when it runs: at wait_for() of a later fence, or synchronize(). Each run copy is
// recorded with the bytes it delivered. No ops: BatchPlan only moves memory.
class DeferredDmaBackend final : public Backend {
 public:
  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  std::vector<std::vector<std::int32_t>> delivered;  // what each copy wrote, in the order they ran

  Device device() const override { return Device{DeviceType::kCuda, 0}; }
  std::string describe() const override { return "deferred-DMA test backend"; }
  DType activation_dtype() const override { return DType::kF32; }
  absl::StatusOr<DeviceBuffer> allocate(std::size_t bytes) override {
    return DeviceBuffer(this, std::calloc(std::max<std::size_t>(bytes, 1), 1), bytes);
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    queue_.push_back(Copy{dst, src, bytes});  // (only staging sources are used here)
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    synchronize();
    std::memcpy(dst, src, bytes);
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    synchronize();
    std::memcpy(dst, src, bytes);
  }
  bool reads_host_memory() const override { return false; }
  void synchronize() override { run_until(enqueued_ + queue_.size()); }
  std::uint64_t fence() override { return enqueued_ + queue_.size(); }
  void wait_for(std::uint64_t f) override { run_until(f); }

  void embedding(const TensorView&, const TensorView&, const TensorView&) override { unused(); }
  void rms_norm(const TensorView&, const TensorView&, float, const TensorView&) override { unused(); }
  void add_rms_norm(const TensorView&, const TensorView&, const TensorView&, float, const TensorView&) override { unused(); }
  void linear(const TensorView&, const TensorView&, const TensorView&, const TensorView&) override { unused(); }
  void rope_cos_sin(const TensorView&, const TensorView&, const TensorView&) override { unused(); }
  void apply_rope(const TensorView&, const TensorView&) override { unused(); }
  void silu_mul(const TensorView&, const TensorView&) override { unused(); }
  void add(const TensorView&, const TensorView&, const TensorView&) override { unused(); }
  void silu_add(const TensorView&, const TensorView&, const TensorView&) override { unused(); }
  void gather_rows(const TensorView&, const TensorView&, const TensorView&) override { unused(); }
  void copy(const TensorView&, const TensorView&) override { unused(); }
  void write_kv(const TensorView&, const TensorView&, const TensorView&, const TensorView&) override { unused(); }
  void paged_attention(const TensorView&, const TensorView&, const AttentionBatch&, float, int,
                       const TensorView&) override {
    unused();
  }
  void argmax_rows(const TensorView&, const TensorView&) override { unused(); }

 protected:
  void free(void* data, std::size_t) override { std::free(data); }

 private:
  static void unused() { BATON_CHECK(false, "BatchPlan ran an op"); }
  // Runs the queued copies numbered below `f` (copies are numbered from 0 in enqueue order).
  void run_until(std::uint64_t f) {
    while (enqueued_ < f && !queue_.empty()) {
      const Copy c = queue_.front();
      queue_.pop_front();
      ++enqueued_;
      std::memcpy(c.dst, c.src, c.bytes);
      const auto* p = static_cast<const std::int32_t*>(c.src);
      delivered.emplace_back(p, p + c.bytes / sizeof(std::int32_t));
    }
  }
  std::deque<Copy> queue_;
  std::uint64_t enqueued_ = 0;  // copies run so far
};

// 8 tokens, sequences of up to 32 positions in blocks of 16, a vocabulary of 100.
BatchLimits small_limits(std::int32_t max_num_seqs, std::int32_t max_num_logits) {
  BatchLimits limits;
  limits.max_num_tokens = 8;
  limits.max_num_seqs = max_num_seqs;
  limits.max_num_logits = max_num_logits;
  limits.max_model_len = 32;
  limits.block_size = 16;
  limits.vocab_size = 100;
  return limits;
}

TEST(BatchPlan, EachForwardUploadsItsOwnMetadataWhileTheLastCopyIsInFlight) {
  DeferredDmaBackend backend;
  const BatchLimits limits = small_limits(/*max_num_seqs=*/2, /*max_num_logits=*/2);
  BatchPlan plan;
  ASSERT_TRUE(plan.allocate(backend, limits).ok());
  const std::vector<std::int32_t> blocks = {3, 1};
  const std::vector<std::int32_t> last = {0};
  // Five forwards, a different token each, without the host ever waiting for the device.
  std::vector<std::vector<std::int32_t>> tokens;
  for (std::int32_t f = 0; f < 5; ++f) {
    tokens.push_back({10 + f});
    ForwardSequence seq;
    seq.tokens = tokens.back();
    seq.start_position = f;
    seq.block_table = blocks;
    seq.logits_indices = last;
    ForwardBatch batch;
    batch.sequences.push_back(seq);
    ASSERT_TRUE(plan.plan(batch, /*num_blocks=*/4).ok());
  }
  backend.synchronize();
  ASSERT_EQ(backend.delivered.size(), 5u);
  for (std::size_t f = 0; f < 5; ++f) {
    // Packed order: tokens, positions, token_seq, slots, logits rows, block tables.
    const std::vector<std::int32_t>& d = backend.delivered[f];
    ASSERT_GE(d.size(), 4u);
    EXPECT_EQ(d[0], 10 + static_cast<std::int32_t>(f)) << "forward " << f << " uploaded another forward's tokens";
    EXPECT_EQ(d[1], static_cast<std::int32_t>(f)) << "forward " << f;
    EXPECT_EQ(d[3], 3 * 16 + static_cast<std::int32_t>(f)) << "forward " << f << ": slot";
  }
}

// A graph's padding (engine/model/forward_graphs.h): sequences shaped like the batch's (two tokens,
// logits at both) at positions 0.. over block 0, every block-table entry 0, slot -1; attention
// bounded by max_model_len; batches of mixed shapes and pads below the batch refused.
TEST(BatchPlan, PaddingAddsSequencesThatReadBlockZeroAndWriteNothing) {
  DeferredDmaBackend backend;
  const BatchLimits limits = small_limits(/*max_num_seqs=*/4, /*max_num_logits=*/8);  // two blocks per sequence
  BatchPlan plan;
  ASSERT_TRUE(plan.allocate(backend, limits).ok());
  const std::vector<std::int32_t> blocks_a = {3}, blocks_b = {2, 1};
  const std::vector<std::int32_t> tokens_a = {11, 12}, tokens_b = {21, 22}, both = {0, 1};
  ForwardBatch batch;
  batch.sequences.push_back({tokens_a, 5, blocks_a, both});   // positions 5, 6 in block 3
  batch.sequences.push_back({tokens_b, 17, blocks_b, both});  // positions 17, 18 in block 1
  ASSERT_TRUE(plan.plan(batch, /*num_blocks=*/4, GraphShape{4, 2, 2}).ok());
  EXPECT_EQ(plan.num_tokens(), 8);
  EXPECT_EQ(plan.num_logits(), 8);
  EXPECT_EQ(plan.num_seqs(), 4);
  EXPECT_EQ(plan.attention().max_context_len, 32);
  backend.synchronize();
  ASSERT_EQ(backend.delivered.size(), 1u);
  const std::vector<std::int32_t> expected = {
      11, 12, 21, 22, 0, 0, 0, 0,                      // tokens
      5, 6, 17, 18, 0, 1, 0, 1,                        // positions
      0, 0, 1, 1, 2, 2, 3, 3,                          // token_seq
      3 * 16 + 5, 3 * 16 + 6, 16 + 1, 16 + 2, -1, -1, -1, -1,  // slots
      0, 1, 2, 3, 4, 5, 6, 7,                          // logits rows
      3, -1, 2, 1, 0, 0, 0, 0,                         // block tables [4, 2]
      0, 2, -1, -1, 2, 2, -1, -1, 4, 2, -1, -1, 6, 2, -1, -1,  // recurrent rows: (first row, tokens, group, slot)
  };
  EXPECT_EQ(backend.delivered[0], expected);

  // Unpadded, the same batch's attention bound is its own longest context.
  ASSERT_TRUE(plan.plan(batch, 4).ok());
  EXPECT_EQ(plan.attention().max_context_len, 19);

  const std::vector<std::int32_t> last = {1};
  ForwardBatch mixed = batch;
  mixed.sequences[1].logits_indices = last;
  EXPECT_FALSE(plan.plan(mixed, 4, GraphShape{4, 2, 2}).ok()) << "logits at the last token padded as every token";
  EXPECT_FALSE(plan.plan(mixed, 4, GraphShape{4, 2, 1}).ok()) << "logits at every token padded as the last";
  EXPECT_FALSE(plan.plan(batch, 4, GraphShape{1, 2, 2}).ok()) << "padded below the batch";
  EXPECT_FALSE(plan.plan(batch, 4, GraphShape{4, 1, 1}).ok()) << "padded below a sequence's length";
  EXPECT_FALSE(plan.plan(batch, 4, GraphShape{5, 2, 2}).ok()) << "padded beyond max_num_seqs";
}

// Sequences of different lengths (a verification of one draft next to a decode) pad to the longest:
// the shorter one gets filler tokens after every real token and every padding sequence, at its
// position 0 (one key to attend to), writing no KV; with logits at every token they get logits rows too, after the real
// ones; with logits at the last token they get none.
TEST(BatchPlan, ShorterSequencesGetFillersAfterTheRealRows) {
  DeferredDmaBackend backend;
  const BatchLimits limits = small_limits(/*max_num_seqs=*/4, /*max_num_logits=*/8);
  BatchPlan plan;
  ASSERT_TRUE(plan.allocate(backend, limits).ok());
  const std::vector<std::int32_t> blocks_a = {3}, blocks_b = {2, 1};
  const std::vector<std::int32_t> tokens_a = {11, 12}, tokens_b = {21}, every_a = {0, 1}, only_b = {0};
  ForwardBatch batch;
  batch.sequences.push_back({tokens_a, 5, blocks_a, every_a});  // positions 5, 6 in block 3
  batch.sequences.push_back({tokens_b, 17, blocks_b, only_b});  // position 17 in block 1
  ASSERT_TRUE(fits_shape(batch, GraphShape{4, 2, 2}));
  ASSERT_TRUE(plan.plan(batch, /*num_blocks=*/4, GraphShape{4, 2, 2}).ok());
  EXPECT_EQ(plan.num_tokens(), 8);
  EXPECT_EQ(plan.num_logits(), 8);
  backend.synchronize();
  ASSERT_EQ(backend.delivered.size(), 1u);
  const std::vector<std::int32_t> expected = {
      11, 12, 21, 0, 0, 0, 0, 0,                         // tokens: real, padding sequences 2 and 3, b's filler
      5, 6, 17, 0, 1, 0, 1, 0,                           // positions: the filler at b's first
      0, 0, 1, 2, 2, 3, 3, 1,                            // token_seq: the filler is b's
      3 * 16 + 5, 3 * 16 + 6, 16 + 1, -1, -1, -1, -1, -1,  // slots
      0, 1, 2, 3, 4, 5, 6, 7,                            // logits rows: real ones first
      3, -1, 2, 1, 0, 0, 0, 0,                           // block tables [4, 2]
      0, 2, -1, -1, 2, 1, -1, -1, 3, 2, -1, -1, 5, 2, -1, -1,  // recurrent rows: no filler among them
  };
  EXPECT_EQ(backend.delivered[0], expected);

  // Logits at each sequence's last token: none for the filler.
  const std::vector<std::int32_t> last_a = {1};
  batch.sequences[0].logits_indices = last_a;
  ASSERT_TRUE(plan.plan(batch, 4, GraphShape{4, 2, 1}).ok());
  EXPECT_EQ(plan.num_logits(), 4);
  backend.synchronize();
  ASSERT_EQ(backend.delivered.size(), 2u);
  const std::vector<std::int32_t> last_rows(backend.delivered[1].begin() + 32, backend.delivered[1].begin() + 36);
  EXPECT_EQ(last_rows, (std::vector<std::int32_t>{1, 2, 4, 6}));
}

}  // namespace
}  // namespace baton
