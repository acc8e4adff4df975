// Which transports the UCX shared-memory context gets for a user's UCX_TLS: every shared-memory
// one by default, only those the user named, none when the user's list has no shared-memory
// transport that can carry a put (UCX_TLS=tcp must force the network path).
#include "gtest/gtest.h"
#include "kv_transfer/ucx_shm_memory.h"

namespace baton::kv {
namespace {

TEST(SharedMemoryTransportsTest, DefaultAndAllMeanEverySharedMemoryTransport) {
  EXPECT_EQ(shared_memory_transports(nullptr), "sm");
  EXPECT_EQ(shared_memory_transports(""), "sm");
  EXPECT_EQ(shared_memory_transports("all"), "sm");
  EXPECT_EQ(shared_memory_transports("tcp,all"), "sm");
}

TEST(SharedMemoryTransportsTest, ListsKeepTheirSharedMemoryTransports) {
  EXPECT_EQ(shared_memory_transports("tcp,sysv"), "sysv");
  EXPECT_EQ(shared_memory_transports("posix,cma,rc"), "posix,cma");
  EXPECT_EQ(shared_memory_transports("sm,tcp"), "sm");
  EXPECT_EQ(shared_memory_transports("shm"), "shm");
}

TEST(SharedMemoryTransportsTest, ListsWithoutAPutCarrierHaveNoSharedMemoryPath) {
  EXPECT_EQ(shared_memory_transports("tcp"), std::nullopt);
  EXPECT_EQ(shared_memory_transports("rc,ud"), std::nullopt);
  EXPECT_EQ(shared_memory_transports("cma,tcp"), std::nullopt);  // cma alone cannot wire up
}

TEST(SharedMemoryTransportsTest, ExclusionsOfSharedMemoryDropThePath) {
  EXPECT_EQ(shared_memory_transports("^tcp"), "sm");
  EXPECT_EQ(shared_memory_transports("^posix"), std::nullopt);
  EXPECT_EQ(shared_memory_transports("^rc,sm"), std::nullopt);
}

}  // namespace
}  // namespace baton::kv
