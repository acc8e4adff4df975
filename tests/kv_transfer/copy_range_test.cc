// Copy-range helpers: the overflow-safe bounds check and the merging of adjacent copies.
#include "kv_transfer/copy_range.h"

#include "gtest/gtest.h"
#include "kv_test_support.h"

namespace baton::kv {
namespace {

bool same(const std::vector<Copy>& a, const std::vector<Copy>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].src_offset != b[i].src_offset || a[i].dst_offset != b[i].dst_offset || a[i].bytes != b[i].bytes) return false;
  }
  return true;
}

TEST(CopyRangeTest, ChecksBoundsWithoutOverflow) {
  EXPECT_TRUE(check_pool_range("peer", "t", 0, 0, 100, 100).ok());
  EXPECT_TRUE(check_pool_range("peer", "t", 0, 100, 0, 100).ok());
  EXPECT_FALSE(check_pool_range("peer", "t", 0, 1, 100, 100).ok());
  EXPECT_FALSE(check_pool_range("peer", "t", 0, 101, 0, 100).ok());
  absl::Status wrap = check_pool_range("peer", "request r", 1, ~std::uint64_t{0} - 4, 10, 100);
  EXPECT_EQ(wrap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::mentions(wrap, "request r: peer pool 1"));
}

TEST(CopyRangeTest, MergesCopiesAdjacentOnBothSides) {
  std::vector<Copy> copies{
      {0, 1000, 100}, {100, 1100, 50},  // adjacent on both sides: one copy
      {150, 2000, 10},                  // source continues, destination does not
      {160, 2010, 0},                   // empty: dropped
      {160, 2010, 5},                   // continues the one before the empty one
      {500, 0, 8},
  };
  merge_adjacent_copies(copies);
  EXPECT_TRUE(same(copies, {{0, 1000, 150}, {150, 2000, 15}, {500, 0, 8}}));

  std::vector<Copy> none;
  merge_adjacent_copies(none);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace baton::kv
