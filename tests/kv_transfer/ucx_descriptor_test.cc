// The UCX descriptor codec (version 2, with and without its shared-memory section): round trip,
// and every malformation rejected with the field named.
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

UcxDescriptor sample_with_shm() {
  UcxDescriptor d = sample();
  d.shm = UcxShmSection{std::string("shm\0worker", 10), {std::string("s\0k0", 4), "shmkey1"}};
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
  bytes[4] = 1;  // version 1 (before the shared-memory section)
  expect_invalid(bytes, "version 1");
  bytes[4] = 3;
  expect_invalid(bytes, "version 3");
}

TEST(UcxDescriptorTest, RoundTripsTheSharedMemorySection) {
  EXPECT_FALSE(decode_ucx_descriptor(encode_ucx_descriptor(sample()))->shm.has_value());
  const UcxDescriptor d = sample_with_shm();
  auto decoded = decode_ucx_descriptor(encode_ucx_descriptor(d));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decoded->shm.has_value());
  EXPECT_EQ(decoded->shm->worker_address, d.shm->worker_address);
  EXPECT_EQ(decoded->shm->rkeys, d.shm->rkeys);
  EXPECT_EQ(decoded->worker_address, d.worker_address);
  EXPECT_EQ(decoded->pools[1].rkey, d.pools[1].rkey);
}

TEST(UcxDescriptorTest, RejectsMalformedSharedMemorySections) {
  const std::string with_shm = encode_ucx_descriptor(sample_with_shm());
  for (std::size_t n = 0; n < with_shm.size(); ++n) {
    EXPECT_FALSE(decode_ucx_descriptor(with_shm.substr(0, n)).ok()) << "accepted a prefix of " << n << " bytes";
  }
  expect_invalid(with_shm.substr(0, with_shm.size() - 1), "shared-memory rkey of pool 1");
  expect_invalid(with_shm + "z", "trailing bytes after the last shared-memory rkey");

  // The flag is the u32 after the network section: 0 or 1 only.
  std::string bad_flag = encode_ucx_descriptor(sample());
  bad_flag[bad_flag.size() - 4] = 2;
  expect_invalid(bad_flag, "shared-memory flag 2");

  UcxDescriptor no_address = sample_with_shm();
  no_address.shm->worker_address.clear();
  expect_invalid(encode_ucx_descriptor(no_address), "shared-memory worker address is empty");

  UcxDescriptor empty_key = sample_with_shm();
  empty_key.shm->rkeys[0].clear();
  expect_invalid(encode_ucx_descriptor(empty_key), "shared-memory rkey of pool 0 is empty");

  UcxDescriptor missing_key = sample_with_shm();
  missing_key.shm->rkeys.pop_back();  // one key for two pools
  expect_invalid(encode_ucx_descriptor(missing_key), "shared-memory rkey of pool 1");
}

TEST(UcxDescriptorTest, RejectsEveryTruncation) {
  const std::string bytes = encode_ucx_descriptor(sample());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto decoded = decode_ucx_descriptor(bytes.substr(0, n));
    EXPECT_FALSE(decoded.ok()) << "accepted a prefix of " << n << " bytes";
  }
  expect_invalid(bytes.substr(0, bytes.size() - 1), "shared-memory flag");
  expect_invalid(bytes.substr(0, bytes.size() - 4), "shared-memory flag");
  expect_invalid(bytes.substr(0, bytes.size() - 5), "pool 1 rkey");
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
