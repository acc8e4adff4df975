// ContextStore: deltas build the same sequence the node holds, resyncs replace, the token budget
// holds over adds, appends and removals.
#include "proposer_node/context_store.h"

#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

std::vector<std::int32_t> seq(std::int32_t from, std::int32_t n) {
  std::vector<std::int32_t> v;
  for (std::int32_t i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

TEST(ContextStore, AddThenAppendsBuildTheSequence) {
  ContextStore store(1000);
  std::optional<SidecarContext> replaced;
  ASSERT_TRUE(store.add(7, seq(0, 5), 5, /*key=*/1, &replaced).ok());
  EXPECT_FALSE(replaced.has_value());
  ASSERT_TRUE(store.append(7, seq(5, 2)).ok());
  ASSERT_TRUE(store.append(7, seq(7, 1)).ok());
  const SidecarContext* c = store.find(7);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->tokens, seq(0, 8));
  EXPECT_EQ(c->prompt_len, 5);
  EXPECT_EQ(store.num_tokens(), 8);
}

TEST(ContextStore, AppendToUnknownRequestIsNotFound) {
  ContextStore store(1000);
  const absl::Status s = store.append(3, seq(0, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("request 3"), std::string_view::npos) << s.message();
}

TEST(ContextStore, ResyncAddReplacesAndHandsBackTheOldContext) {
  ContextStore store(1000);
  std::optional<SidecarContext> replaced;
  ASSERT_TRUE(store.add(1, seq(0, 4), 4, 10, &replaced).ok());
  ASSERT_TRUE(store.add(1, seq(0, 9), 4, 11, &replaced).ok());
  ASSERT_TRUE(replaced.has_value());
  EXPECT_EQ(replaced->key, 10u);
  EXPECT_EQ(store.find(1)->key, 11u);
  EXPECT_EQ(store.num_tokens(), 9);
  EXPECT_EQ(store.size(), 1u);
}

TEST(ContextStore, BadPromptLenIsRefused) {
  ContextStore store(1000);
  std::optional<SidecarContext> replaced;
  EXPECT_EQ(store.add(1, seq(0, 3), 4, 1, &replaced).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.add(1, seq(0, 3), -1, 1, &replaced).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.size(), 0u);
}

TEST(ContextStore, TokenBudgetHoldsAndRemovalsFreeIt) {
  ContextStore store(10);
  std::optional<SidecarContext> replaced;
  ASSERT_TRUE(store.add(1, seq(0, 6), 6, 1, &replaced).ok());
  EXPECT_EQ(store.add(2, seq(0, 5), 5, 2, &replaced).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store.add(2, seq(0, 4), 4, 2, &replaced).ok());
  EXPECT_EQ(store.append(1, seq(6, 1)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.find(1)->tokens.size(), 6u);  // a refused append changes nothing
  // A resync of request 1 may reuse its own tokens' share of the budget.
  ASSERT_TRUE(store.add(1, seq(0, 6), 6, 3, &replaced).ok());
  ASSERT_TRUE(store.remove(2).has_value());
  EXPECT_FALSE(store.remove(2).has_value());
  ASSERT_TRUE(store.append(1, seq(6, 4)).ok());
  EXPECT_EQ(store.num_tokens(), 10);
  EXPECT_EQ(store.take_all().size(), 1u);
  EXPECT_EQ(store.num_tokens(), 0);
}

}  // namespace
}  // namespace baton
