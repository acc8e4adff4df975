// KvChunkPacker: chunks stay under the size limit (data plus per-segment charge), keep one pool
// each, split large copies at the right offsets, carry the request id once, reassemble into
// exactly the copied bytes, and reject out-of-range sources.
#include "kv_transfer/kv_chunk_packer.h"

#include <cstring>

#include "gtest/gtest.h"
#include "kv_test_support.h"

namespace baton::kv {
namespace {

constexpr std::size_t kSegmentCharge = 24;  // what kv_chunk_packer.cc counts per segment

class KvChunkPackerTest : public ::testing::Test {
 protected:
  KvChunkPackerTest() : target_(1000), draft_(300) {
    for (std::size_t i = 0; i < target_.size(); ++i) target_[i] = static_cast<char>(i * 7);
    for (std::size_t i = 0; i < draft_.size(); ++i) draft_[i] = static_cast<char>(i * 13 + 1);
    pools_ = {{"target", target_.data(), target_.size()}, {"draft", draft_.data(), draft_.size()}};
  }
  std::vector<char> target_, draft_;
  std::vector<MemoryRegion> pools_;
};

TEST_F(KvChunkPackerTest, ChunksReassembleIntoTheCopiedBytes) {
  constexpr std::size_t kMax = 124;
  KvChunkPacker packer(&pools_, "req-7", "token-7", kMax);
  std::vector<Copy> copies0{{10, 5000, 250}, {0, 0, 0}, {600, 9000, 30}};
  for (std::uint64_t i = 0; i < 40; ++i) copies0.push_back({700 + i, 9100 + 2 * i, 1});  // tiny segments
  const std::vector<Copy> copies1{{3, 40, 20}};
  packer.add(0, copies0);
  packer.add(1, copies1);

  std::vector<char> dst0(10000, 0), dst1(100, 0);
  std::vector<baton::node::v1::KvChunk> chunks;
  while (!packer.empty()) ASSERT_TRUE(packer.next(chunks.emplace_back()).ok());
  ASSERT_GE(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].request_id(), "req-7");
  EXPECT_EQ(chunks[0].capability(), "token-7");  // the request's token rides with its id
  int last_pool = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    if (i > 0) {
      EXPECT_TRUE(c.request_id().empty());
      EXPECT_TRUE(c.capability().empty());
    }
    EXPECT_GE(c.pool(), last_pool);  // pool 0's chunks, then pool 1's
    last_pool = c.pool();
    std::size_t charged = 0;
    for (const auto& s : c.segments()) {
      charged += s.data().size() + kSegmentCharge;
      std::vector<char>& dst = c.pool() == 0 ? dst0 : dst1;
      ASSERT_LE(s.dst_offset() + s.data().size(), dst.size());
      std::memcpy(dst.data() + s.dst_offset(), s.data().data(), s.data().size());
    }
    EXPECT_LE(charged, kMax);
  }
  std::vector<char> want0(10000, 0), want1(100, 0);
  for (const Copy& c : copies0) std::memcpy(want0.data() + c.dst_offset, target_.data() + c.src_offset, c.bytes);
  for (const Copy& c : copies1) std::memcpy(want1.data() + c.dst_offset, draft_.data() + c.src_offset, c.bytes);
  EXPECT_EQ(dst0, want0);
  EXPECT_EQ(dst1, want1);
  EXPECT_EQ(packer.bytes_packed(), 250 + 30 + 40 + 20);
}

TEST_F(KvChunkPackerTest, RejectsOutOfRangeSourcesAndPools) {
  {
    KvChunkPacker packer(&pools_, "req-1", "token-1", 100);
    packer.add(1, {{0, 0, 10}, {295, 0, 10}});
    baton::node::v1::KvChunk chunk;
    absl::Status status = packer.next(chunk);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(testing::mentions(status, "copy 1"));
    EXPECT_TRUE(testing::mentions(status, "req-1"));
  }
  {
    KvChunkPacker packer(&pools_, "req-2", "token-2", 100);
    packer.add(5, {{0, 0, 10}});
    baton::node::v1::KvChunk chunk;
    EXPECT_EQ(packer.next(chunk).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace baton::kv
