// StepBatch's choice of logits rows to copy when the host cannot read device memory: only the
// chunks the host samples, each row once, consecutive chunks merged into one copy.
#include "engine/step_batch.h"

#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

std::vector<RowRange> ranges(const std::vector<std::size_t>& first, const std::vector<std::int32_t>& num,
                             const std::vector<char>& device) {
  std::vector<RowRange> out{{99, 100}};  // stale contents are replaced
  host_row_ranges(first, num, device, out);
  return out;
}

TEST(HostRowRanges, CopiesOnlyTheHostSampledChunksMergingNeighbours) {
  // Chunks: a verification of 5 rows (device), a decode (host), a prefill piece without logits,
  // a decode (host), a verification of 3 rows (host), a decode (device), a decode (host).
  const std::vector<std::size_t> first = {0, 5, 6, 6, 7, 10, 11};
  const std::vector<std::int32_t> num = {5, 1, 0, 1, 3, 1, 1};
  const std::vector<char> device = {1, 0, 0, 0, 0, 1, 0};
  EXPECT_EQ(ranges(first, num, device), (std::vector<RowRange>{{5, 10}, {11, 12}}));
}

TEST(HostRowRanges, AllDeviceOrAllHost) {
  const std::vector<std::size_t> first = {0, 1, 4};
  const std::vector<std::int32_t> num = {1, 3, 2};
  EXPECT_TRUE(ranges(first, num, {1, 1, 1}).empty());
  EXPECT_EQ(ranges(first, num, {0, 0, 0}), (std::vector<RowRange>{{0, 6}}));
  EXPECT_EQ(ranges(first, num, {0, 1, 0}), (std::vector<RowRange>{{0, 1}, {4, 6}}));
}

}  // namespace
}  // namespace baton
