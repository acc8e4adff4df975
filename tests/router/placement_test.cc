// router/placement: the choice of decode node (free KV, then load), of prefill node (queued prefill
// tokens, then load) among those allowed with it, and when a request prefills on the decode node.
#include "router/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "node_info_builders.h"

namespace baton::router {
namespace {

using ::testing::HasSubstr;
using baton::node::v1::NodeInfo;
using testing::node_info;
using testing::with_load;

NodeView view(const std::string& address, const NodeInfo& info) {
  NodeView v;
  v.address = address;
  v.info = &info;
  return v;
}

PlacementRequest prompt_of(std::int64_t len) {
  PlacementRequest r;
  r.prompt_len = len;
  return r;
}

TEST(Placement, NoDecodeNodeIsUnavailable) {
  const NodeInfo p = with_load(node_info("prefill"), 100);
  std::vector<NodeView> ps = {view("p:1", p)};
  auto placed = place({}, ps, prompt_of(10));
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kUnavailable);
}

TEST(Placement, DecodeWithTheMostFreeBlocksThenTheLeastLoad) {
  const NodeInfo a = with_load(node_info("decode"), 100, /*running=*/0);
  const NodeInfo b = with_load(node_info("decode"), 300, /*running=*/9);
  const NodeInfo c = with_load(node_info("decode"), 300, /*running=*/2, /*waiting=*/1);
  std::vector<NodeView> ds = {view("a", a), view("b", b), view("c", c)};
  auto placed = place(ds, {}, prompt_of(10));
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->decode, 2);  // b and c tie on free blocks; c runs fewer
  // Blocks the router reserved on c since its Info count against it.
  ds[2].reserved_blocks = 250;
  EXPECT_EQ(place(ds, {}, prompt_of(10))->decode, 1);
  // And requests the router started since the Info count as load.
  ds[2].reserved_blocks = 0;
  ds[2].requests = 7;
  EXPECT_EQ(place(ds, {}, prompt_of(10))->decode, 1);
}

TEST(Placement, EstimatedFreeBlocksAndPromptBlocks) {
  const NodeInfo d = with_load(node_info("decode"), 10);
  NodeView v = view("d", d);
  v.reserved_blocks = 4;
  EXPECT_EQ(estimated_free_blocks(v), 6);
  v.reserved_blocks = 40;
  EXPECT_EQ(estimated_free_blocks(v), 0);
  EXPECT_EQ(blocks_for_prompt(d, 1), 1);
  EXPECT_EQ(blocks_for_prompt(d, 16), 1);
  EXPECT_EQ(blocks_for_prompt(d, 17), 2);
}

TEST(Placement, PrefillWithTheLeastQueuedTokens) {
  const NodeInfo d = with_load(node_info("decode"), 100);
  const NodeInfo p1 = with_load(node_info("prefill"), 0, 0, 0, /*queued=*/5000);
  const NodeInfo p2 = with_load(node_info("prefill"), 0, 0, 0, /*queued=*/100);
  const NodeInfo p3 = with_load(node_info("prefill"), 0, 0, 0, /*queued=*/800);
  std::vector<NodeView> ds = {view("d", d)};
  std::vector<NodeView> ps = {view("p1", p1), view("p2", p2), view("p3", p3)};
  auto placed = place(ds, ps, prompt_of(50));
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->site, PrefillSite::kPrefillNode);
  EXPECT_EQ(placed->prefill, 1);
  ps[1].queued_tokens = 1000;  // the router's own prompts sent to p2 since its Info
  EXPECT_EQ(place(ds, ps, prompt_of(50))->prefill, 2);
}

TEST(Placement, ShortPromptsAndForcedRequestsPrefillLocally) {
  const NodeInfo d = with_load(node_info("decode"), 100);
  const NodeInfo p = with_load(node_info("prefill"), 0);
  std::vector<NodeView> ds = {view("d", d)};
  std::vector<NodeView> ps = {view("p", p)};
  PlacementRequest r = prompt_of(32);
  r.local_prefill_max_tokens = 32;
  auto placed = place(ds, ps, r);
  EXPECT_EQ(placed->site, PrefillSite::kLocalShortPrompt);
  EXPECT_EQ(placed->prefill, -1);
  r.prompt_len = 33;
  EXPECT_EQ(place(ds, ps, r)->site, PrefillSite::kPrefillNode);
  r.force_local_prefill = true;
  EXPECT_EQ(place(ds, ps, r)->site, PrefillSite::kLocalForced);
  // The default (0) always disaggregates when a prefill node pairs.
  EXPECT_EQ(place(ds, ps, prompt_of(1))->site, PrefillSite::kPrefillNode);
}

TEST(Placement, NoPrefillNodeFallsBackToLocalUnlessTurnedOff) {
  const NodeInfo d = with_load(node_info("decode"), 100);
  std::vector<NodeView> ds = {view("d", d)};
  EXPECT_EQ(place(ds, {}, prompt_of(100))->site, PrefillSite::kLocalNoPrefill);
  PlacementRequest strict = prompt_of(100);
  strict.local_fallback = false;
  EXPECT_EQ(place(ds, {}, strict).status().code(), absl::StatusCode::kUnavailable);
}

TEST(Placement, RefusedPairsFailWithTheRuleInsteadOfFallingBack) {
  const NodeInfo d = with_load(node_info("decode", "eagle3", 4), 100);
  const NodeInfo p = with_load(node_info("prefill"), 0);  // no speculation: D's EAGLE-3 needs P's state
  std::vector<NodeView> ds = {view("d:1", d)};
  std::vector<NodeView> ps = {view("p:1", p)};
  for (const bool fallback : {true, false}) {
    PlacementRequest request = prompt_of(100);
    request.local_fallback = fallback;
    const auto refused = place(ds, ps, request);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(refused.status().message(), HasSubstr("prefill node p:1 and decode node d:1 cannot be paired"));
    EXPECT_THAT(refused.status().message(), HasSubstr("needs draft-side state"));
  }
  // A short prompt still goes local (conditional disaggregation does not need a pair).
  PlacementRequest short_prompt = prompt_of(100);
  short_prompt.local_prefill_max_tokens = 100;
  EXPECT_EQ(place(ds, ps, short_prompt)->site, PrefillSite::kLocalShortPrompt);
}

TEST(Placement, PrefersADecodeNodeThatHasAPair) {
  // d1 has more free blocks but no prefill node may feed it; d2 pairs with p.
  const NodeInfo d1 = with_load(node_info("decode", "mtp", 2), 900);
  const NodeInfo d2 = with_load(node_info("decode", "eagle3", 4), 100);
  const NodeInfo p = with_load(node_info("prefill", "eagle3", 1), 0);
  std::vector<NodeView> ds = {view("d1", d1), view("d2", d2)};
  std::vector<NodeView> ps = {view("p", p)};
  auto placed = place(ds, ps, prompt_of(100));
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->site, PrefillSite::kPrefillNode);
  EXPECT_EQ(placed->decode, 1);
  EXPECT_EQ(placed->prefill, 0);
  // A short prompt goes local on the best decode node overall.
  PlacementRequest r = prompt_of(100);
  r.local_prefill_max_tokens = 100;
  EXPECT_EQ(place(ds, ps, r)->decode, 0);
}

TEST(Placement, OnlyAllowedPrefillNodesAreChosen) {
  const NodeInfo d = with_load(node_info("decode", "eagle3", 4), 100);
  const NodeInfo wrong = with_load(node_info("prefill", "mtp", 1), 0, 0, 0, /*queued=*/0);
  const NodeInfo right = with_load(node_info("prefill", "eagle3", 1), 0, 0, 0, /*queued=*/9999);
  std::vector<NodeView> ds = {view("d", d)};
  std::vector<NodeView> ps = {view("wrong", wrong), view("right", right)};
  EXPECT_EQ(place(ds, ps, prompt_of(100))->prefill, 1);
}

}  // namespace
}  // namespace baton::router
