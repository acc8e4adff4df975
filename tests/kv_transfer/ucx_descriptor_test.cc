// The UCX descriptor codec: round trip, and every malformation rejected with the field named.
#include "kv_transfer/ucx_descriptor.h"

#include "gtest/gtest.h"
#include "kv_test_support.h"

namespace baton::kv {
namespace {

UcxDescriptor sample() {
  UcxDescriptor d;
  d.worker_address = std::string("\x01\x02\x00\x03worker", 10);
  d.pools.push_back(UcxRemotePool{"target", 0x7f0000001000, 1 << 20, std::string("rk\0ey0", 6)});
  d.pools.push_back(UcxRemotePool{"draft", 0x7f0000200000, 4096, "rkey1"});
  return d;
}

void expect_invalid(const std::string& bytes, std::string_view says) {
  auto decoded = decode_ucx_descriptor(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::mentions(decoded.status(), says));
}

TEST(UcxDescriptorTest, RoundTrips) {
  const UcxDescriptor d = sample();
  auto decoded = decode_ucx_descriptor(encode_ucx_descriptor(d));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->worker_address, d.worker_address);
  ASSERT_EQ(decoded->pools.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(decoded->pools[i].name, d.pools[i].name);
    EXPECT_EQ(decoded->pools[i].base, d.pools[i].base);
    EXPECT_EQ(decoded->pools[i].bytes, d.pools[i].bytes);
    EXPECT_EQ(decoded->pools[i].rkey, d.pools[i].rkey);
  }
}

TEST(UcxDescriptorTest, RejectsOtherTransportsAndVersions) {
  expect_invalid("grpc/1", "magic");
  expect_invalid("", "magic");
  std::string bytes = encode_ucx_descriptor(sample());
  bytes[4] = 2;  // version 2
  expect_invalid(bytes, "version 2");
}

TEST(UcxDescriptorTest, RejectsEveryTruncation) {
  const std::string bytes = encode_ucx_descriptor(sample());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto decoded = decode_ucx_descriptor(bytes.substr(0, n));
    EXPECT_FALSE(decoded.ok()) << "accepted a prefix of " << n << " bytes";
  }
  expect_invalid(bytes.substr(0, bytes.size() - 1), "pool 1 rkey");
}

TEST(UcxDescriptorTest, RejectsTrailingBytesAndImpossiblePools) {
  expect_invalid(encode_ucx_descriptor(sample()) + "z", "trailing");

  UcxDescriptor empty_pool = sample();
  empty_pool.pools[1].bytes = 0;
  expect_invalid(encode_ucx_descriptor(empty_pool), "pool 1 (draft) is empty");

  UcxDescriptor overflow = sample();
  overflow.pools[0].base = ~std::uint64_t{0} - 10;
  expect_invalid(encode_ucx_descriptor(overflow), "pool 0 (target) base");

  UcxDescriptor no_pools = sample();
  no_pools.pools.clear();
  expect_invalid(encode_ucx_descriptor(no_pools), "pool count 0");

  UcxDescriptor no_address = sample();
  no_address.worker_address.clear();
  expect_invalid(encode_ucx_descriptor(no_address), "worker address is empty");
}

TEST(UcxDescriptorTest, RejectsHugeLengths) {
  std::string bytes = encode_ucx_descriptor(sample());
  bytes[8] = '\xff';
  bytes[9] = '\xff';
  bytes[10] = '\xff';  // worker address length 2^24-1
  expect_invalid(bytes, "worker address length");
}

}  // namespace
}  // namespace baton::kv
