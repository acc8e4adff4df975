// router/running_requests: request ids (assigned unique when empty, refused when already running),
// and cancellation reaching calls in flight and calls made later.
#include "router/running_requests.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace baton::router {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(RunningRequests, AssignsUniqueIdsWhenEmpty) {
  RunningRequests running;
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    std::string id;
    ASSERT_TRUE(running.add(id).ok());
    EXPECT_THAT(id, StartsWith("req-"));
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(running.size(), 100u);
  // Another router process draws another prefix.
  RunningRequests other;
  std::string id;
  ASSERT_TRUE(other.add(id).ok());
  EXPECT_FALSE(ids.contains(id));
}

TEST(RunningRequests, ClientIdsAreKeptAndMustBeUnique) {
  RunningRequests running;
  std::string id = "my-request";
  ASSERT_TRUE(running.add(id).ok());
  EXPECT_EQ(id, "my-request");
  std::string again = "my-request";
  const auto dup = running.add(again);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.status().message(), HasSubstr("\"my-request\" is already running"));
  running.remove("my-request");
  EXPECT_TRUE(running.add(again).ok());
  std::string long_id(300, 'x');
  EXPECT_EQ(running.add(long_id).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RunningRequests, CancelReachesCallsNowAndLater) {
  RunningRequests running;
  std::string id = "r";
  auto control = *running.add(id);
  EXPECT_FALSE(running.cancel("unknown", "x"));
  {
    grpc::ClientContext in_flight;
    RequestControl::CallScope scope(*control, in_flight);
    EXPECT_TRUE(running.cancel("r", "aborted by the Abort RPC"));
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
