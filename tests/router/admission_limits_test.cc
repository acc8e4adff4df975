// The admission limits a router derives from its decode nodes when the operator sets none
// (router/admission_limits.h): the formula over the decode nodes' capacities, and a router that
// follows a node's Info as it comes, and the floor when it goes.
#include "router/admission_limits.h"

#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "router/router_service.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/node_info_builders.h"

namespace baton::router {
namespace {

using testing::node_info;
using testing::with_load;

TEST(DerivedLimits, TwiceTheDecodeNodesBatchSlotsRunAndOneBatchWaits) {
  // A batch holds min(max_num_seqs, KV blocks): 8 for the first node, 20 (its KV) for the second.
  const DerivedLimits d = derive_limits({{.max_num_seqs = 8, .kv_blocks = 1024}, {.max_num_seqs = 64, .kv_blocks = 20}});
  EXPECT_EQ(d.decode_slots, 28u);
  EXPECT_EQ(d.max_running, 56u);
  EXPECT_EQ(d.max_queued, 28u);
  // An older node that reports no max_num_seqs counts its KV blocks alone.
  EXPECT_EQ(decode_batch_slots({.max_num_seqs = 0, .kv_blocks = 40}), 40u);
}

TEST(DerivedLimits, NoNodeGivesTheFloorAndManyNodesTheCap) {
  const DerivedLimits none = derive_limits({});
  EXPECT_EQ(none.max_running, kMinRunning);
  EXPECT_EQ(none.max_queued, kMinQueued);
  const DerivedLimits small = derive_limits({{.max_num_seqs = 2, .kv_blocks = 1024}});
  EXPECT_EQ(small.max_running, kMinRunning);
  EXPECT_EQ(small.max_queued, kMinQueued);
  const std::vector<DecodeCapacity> many(200, DecodeCapacity{.max_num_seqs = 256, .kv_blocks = 1 << 20});
  const DerivedLimits d = derive_limits(many);
  EXPECT_EQ(d.max_running, kMaxDerivedRunning);
  EXPECT_EQ(d.max_queued, kMaxDerivedQueued);
}

TEST(DerivedLimits, TheOperatorsFlagsWinOneByOne) {
  const DerivedLimits d = derive_limits({{.max_num_seqs = 20, .kv_blocks = 1024}});
  RunningLimits l = effective_limits(std::nullopt, std::nullopt, 5, std::chrono::milliseconds(7), d);
  EXPECT_EQ(l.max_running, 40u);
  EXPECT_EQ(l.max_queued, 20u);
  EXPECT_EQ(l.max_per_owner, 5u);
  EXPECT_EQ(l.queue_timeout, std::chrono::milliseconds(7));
  l = effective_limits(0, std::nullopt, 5, std::chrono::milliseconds(7), d);  // 0: no limit, as set
  EXPECT_EQ(l.max_running, 0u);
  EXPECT_EQ(l.max_queued, 20u);
  l = effective_limits(std::nullopt, 3, 5, std::chrono::milliseconds(7), d);
  EXPECT_EQ(l.max_running, 40u);
  EXPECT_EQ(l.max_queued, 3u);
}

// Polls the router's limits (each poll reads a mutex-guarded copy) until `want` or the deadline.
bool limits_become(const RouterService& router, std::size_t running, std::size_t queued) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const RunningLimits l = router.admission_limits();
    if (l.max_running == running && l.max_queued == queued) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The nodes' own Info, through the pool: a decode node counts once it reported and while usable.
TEST(DerivedLimits, ARouterFollowsItsDecodeNodesInfo) {
  baton::node::v1::NodeInfo info = with_load(node_info("decode"), 1000);
  info.set_max_num_seqs(24);
  auto decode = std::make_unique<testing::FakeDecodeNode>(info);
  RouterOptions options;
  options.decode_addresses = {decode->address()};
  options.poll_interval = std::chrono::milliseconds(50);
  RouterService router(options);
  ASSERT_TRUE(router.start().ok());
  EXPECT_TRUE(limits_become(router, 48, 24)) << router.admission_limits().max_running;

  // A second router whose operator set the running limit keeps it; the queue still follows.
  options.max_running_requests = 3;
  RouterService fixed(options);
  ASSERT_TRUE(fixed.start().ok());
  EXPECT_TRUE(limits_become(fixed, 3, 24)) << fixed.admission_limits().max_queued;
  fixed.shutdown();

  // The decode node goes away: nothing is usable, and the limits fall back to the floor.
  decode.reset();
  EXPECT_TRUE(limits_become(router, kMinRunning, kMinQueued)) << router.admission_limits().max_running;
  router.shutdown();
}

}  // namespace
}  // namespace baton::router
