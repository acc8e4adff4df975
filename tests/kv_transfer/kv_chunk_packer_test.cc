// KvChunkPacker: chunks stay under the size limit, keep one pool each, split large copies at the
// right offsets, carry the request id once, and reject out-of-range sources.
#include "kv_transfer/kv_chunk_packer.h"

#include <cstring>

#include "gtest/gtest.h"
#include "kv_test_support.h"

namespace baton::kv {
namespace {

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

TEST_F(KvChunkPackerTest, SplitsLargeCopiesAndKeepsPoolsApart) {
  KvChunkPacker packer(&pools_, "req-7", 100);
  packer.add(0, {{10, 5000, 250}, {0, 0, 0}, {600, 9000, 30}});
  packer.add(1, {{3, 40, 20}});
  std::vector<baton::node::v1::KvChunk> chunks;
  while (!packer.empty()) {
    ASSERT_TRUE(packer.next(chunks.emplace_back()).ok());
  }
  // pool 0: 100 | 100 | 50 + 30 ; pool 1: 20
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].request_id(), "req-7");
  for (std::size_t i = 1; i < chunks.size(); ++i) EXPECT_TRUE(chunks[i].request_id().empty());
  EXPECT_EQ(chunks[2].segments_size(), 2);
  EXPECT_EQ(chunks[2].segments(0).dst_offset(), 5200u);
  EXPECT_EQ(chunks[2].segments(0).data(), std::string(target_.data() + 210, 50));
  EXPECT_EQ(chunks[2].segments(1).dst_offset(), 9000u);
  EXPECT_EQ(chunks[3].pool(), 1);
  EXPECT_EQ(chunks[3].segments(0).data(), std::string(draft_.data() + 3, 20));
  for (const auto& c : chunks) {
    std::size_t bytes = 0;
    for (const auto& s : c.segments()) bytes += s.data().size();
    EXPECT_LE(bytes, 100u);
  }
  EXPECT_EQ(packer.bytes_packed(), 300);
}

TEST_F(KvChunkPackerTest, RejectsOutOfRangeSourcesAndPools) {
  {
    KvChunkPacker packer(&pools_, "req-1", 100);
    packer.add(1, {{0, 0, 10}, {295, 0, 10}});
    baton::node::v1::KvChunk chunk;
    absl::Status status = packer.next(chunk);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(testing::mentions(status, "copy 1"));
    EXPECT_TRUE(testing::mentions(status, "req-1"));
  }
  {
    KvChunkPacker packer(&pools_, "req-2", 100);
    packer.add(5, {{0, 0, 10}});
    baton::node::v1::KvChunk chunk;
    EXPECT_EQ(packer.next(chunk).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace baton::kv
