// router/running_requests: request ids (drawn unguessable when empty, client ids kept and unique
// per owner, malformed ones refused), ownership (only a request's owner aborts it; another
// owner's id is "not found", and the same id may run for two owners), limits in all and per key,
// and cancellation reaching calls in flight and calls made later.
#include "router/running_requests.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace baton::router {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(RunningRequests, DrawsUnguessableIdsWhenEmpty) {
  RunningRequests running;
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    auto r = running.add("", "");
    ASSERT_TRUE(r.ok());
    // 128 random bits; the node id is the same drawn id.
    EXPECT_THAT(r->client_id, MatchesRegex("req-[0-9a-f]{32}"));
    EXPECT_EQ(r->node_id, r->client_id);
    ids.insert(r->client_id);
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(running.size(), 100u);
}

TEST(RunningRequests, ClientIdsAreKeptUniquePerOwnerAndNeverReachNodes) {
  RunningRequests running;
  auto mine = running.add("key-a", "my-request");
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->client_id, "my-request");
  EXPECT_THAT(mine->node_id, MatchesRegex("my-request~[0-9a-f]{16}"));  // nodes see it made unique
  const auto dup = running.add("key-a", "my-request");
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.status().message(), HasSubstr("\"my-request\" is already running"));
  // Another key's request may use the same id: neither learns of the other.
  auto theirs = running.add("key-b", "my-request");
  ASSERT_TRUE(theirs.ok());
  EXPECT_NE(theirs->node_id, mine->node_id);
  running.remove("key-a", "my-request");
  EXPECT_TRUE(running.add("key-a", "my-request").ok());
}

TEST(RunningRequests, MalformedIdsAreRefusedNamingTheField) {
  RunningRequests running;
  for (const std::string& bad : {std::string(300, 'x'), std::string("forged\nlog line"), std::string("tab\there"),
                                 std::string("caf\xc3\xa9")}) {
    const auto r = running.add("", bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("request_id"));
  }
  EXPECT_TRUE(running.add("", "plain id: with spaces, punctuation & symbols ~!").ok());
  EXPECT_EQ(running.size(), 1u);
}

TEST(RunningRequests, OnlyTheOwnerAborts) {
  RunningRequests running;
  auto r = running.add("key-a", "job-1");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(running.cancel("key-b", "job-1", "someone else's abort"));
  EXPECT_FALSE(running.cancel("", "job-1", "an anonymous abort"));
  EXPECT_FALSE(r->control->cancelled());
  EXPECT_TRUE(running.cancel("key-a", "job-1", "aborted by the Abort RPC"));
  EXPECT_TRUE(r->control->cancelled());
}

TEST(RunningRequests, LimitsInAllAndPerKey) {
  RunningRequests running(RunningLimits{.max_running = 5, .max_per_owner = 2});
  ASSERT_TRUE(running.add("key-a", "").ok());
  ASSERT_TRUE(running.add("key-a", "").ok());
  const auto third = running.add("key-a", "");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("--max-running-requests-per-key"));
  ASSERT_TRUE(running.add("key-b", "").ok());  // another key is not held back by key-a
  // Without keys (owner "") only the total counts.
  ASSERT_TRUE(running.add("", "anon-1").ok());
  ASSERT_TRUE(running.add("", "anon-2").ok());
  const auto sixth = running.add("key-c", "");
  EXPECT_EQ(sixth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(sixth.status().message(), HasSubstr("--max-running-requests"));
  running.remove("", "anon-1");
  EXPECT_TRUE(running.add("key-c", "").ok());
}

TEST(RunningRequests, CancelReachesCallsNowAndLater) {
  RunningRequests running;
  auto control = running.add("", "r")->control;
  EXPECT_FALSE(running.cancel("", "unknown", "x"));
  {
    grpc::ClientContext in_flight;
    RequestControl::CallScope scope(*control, in_flight);
    EXPECT_TRUE(running.cancel("", "r", "aborted by the Abort RPC"));
  }
  EXPECT_TRUE(control->cancelled());
  EXPECT_EQ(control->reason(), "aborted by the Abort RPC");
  control->cancel("a later reason");
  EXPECT_EQ(control->reason(), "aborted by the Abort RPC");
  grpc::ClientContext later;
  RequestControl::CallScope scope(*control, later);  // cancelled at once (TryCancel before the call is fine)
}

}  // namespace
}  // namespace baton::router
