// router/running_requests: request ids (drawn unguessable when empty, client ids kept and unique
// per owner, malformed ones refused), ownership (only a request's owner aborts it; another
// owner's id is "not found", and the same id may run for two owners), limits in all and per key,
// cancellation reaching calls in flight and calls made later, and the admission queue (fair
// between keys, bounded, with a deadline, left by clients that go and by a drain).
#include "router/running_requests.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

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

// ---------------------------------------------------------------------------------------------
// The admission queue

using namespace std::chrono_literals;

// Polls `running` until `n` requests wait (each wait is a real thread blocked in add()).
bool queued_within(const RunningRequests& running, std::size_t n, std::chrono::milliseconds limit = 10000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (running.queued() != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(AdmissionQueue, AFreedSlotGoesToTheKeyRunningTheFewest) {
  RunningRequests running(RunningLimits{.max_running = 2, .max_queued = 4, .queue_timeout = 60000ms});
  ASSERT_TRUE(running.add("key-a", "a1").ok());
  ASSERT_TRUE(running.add("key-a", "a2").ok());
  // key-a asks again first, then key-b: both wait.
  auto a3 = std::async(std::launch::async, [&] { return running.add("key-a", "a3"); });
  ASSERT_TRUE(queued_within(running, 1));
  auto b1 = std::async(std::launch::async, [&] { return running.add("key-b", "b1"); });
  ASSERT_TRUE(queued_within(running, 2));

  // One slot frees: key-b runs nothing, key-a runs one, so key-b gets it although it came later.
  running.remove("key-a", "a1");
  ASSERT_EQ(b1.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(b1.get().ok());
  EXPECT_EQ(a3.wait_for(0s), std::future_status::timeout);
  EXPECT_EQ(running.queued(), 1u);
  running.remove("key-a", "a2");
  ASSERT_EQ(a3.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(a3.get().ok());
  EXPECT_EQ(running.size(), 2u);
  const AdmissionCounts c = running.counts();
  EXPECT_EQ(c.admitted, 4);
  EXPECT_EQ(c.admitted_after_wait, 2);
}

TEST(AdmissionQueue, AKeyAtItsOwnLimitDoesNotHoldOthersBack) {
  RunningRequests running(RunningLimits{.max_running = 10, .max_per_owner = 1, .max_queued = 4, .queue_timeout = 60000ms});
  ASSERT_TRUE(running.add("key-a", "a1").ok());
  auto a2 = std::async(std::launch::async, [&] { return running.add("key-a", "a2"); });
  ASSERT_TRUE(queued_within(running, 1));
  // key-b has room: it runs at once, past key-a's waiting request.
  EXPECT_TRUE(running.add("key-b", "b1").ok());
  EXPECT_EQ(running.queued(), 1u);
  running.remove("key-a", "a1");
  ASSERT_EQ(a2.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(a2.get().ok());
}

TEST(AdmissionQueue, AFullQueueIsRefusedAtOnceAndAWaitEndsAtTheQueueTimeout) {
  RunningRequests running(RunningLimits{.max_running = 1, .max_queued = 1, .queue_timeout = 300ms});
  ASSERT_TRUE(running.add("", "r1").ok());
  auto waiting = std::async(std::launch::async, [&] { return running.add("", "r2"); });
  ASSERT_TRUE(queued_within(running, 1));
  const auto t0 = std::chrono::steady_clock::now();
  const auto refused = running.add("", "r3");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max-queued-requests"));
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  const auto timed_out = waiting.get();
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(timed_out.status().message(), HasSubstr("--queue-timeout-ms"));
  EXPECT_EQ(running.queued(), 0u);
  const AdmissionCounts c = running.counts();
  EXPECT_EQ(c.queue_full, 1);
  EXPECT_EQ(c.queue_timeout, 1);
  running.remove("", "r1");
  EXPECT_TRUE(running.add("", "r4").ok());  // the slot and the queue are free again
}

TEST(AdmissionQueue, AClientThatLeavesOrADrainEndsTheWait) {
  RunningRequests running(RunningLimits{.max_running = 1, .max_queued = 4, .queue_timeout = 60000ms});
  ASSERT_TRUE(running.add("", "r1").ok());
  std::atomic<bool> gone{false};
  auto leaving = std::async(std::launch::async, [&] { return running.add("", "r2", [&] { return gone.load(); }); });
  auto draining = std::async(std::launch::async, [&] { return running.add("", "r3"); });
  ASSERT_TRUE(queued_within(running, 2));
  gone = true;
  ASSERT_EQ(leaving.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(leaving.get().status().code(), absl::StatusCode::kCancelled);
  running.refuse_new("the router is draining");
  ASSERT_EQ(draining.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(draining.get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(running.queued(), 0u);
  EXPECT_EQ(running.counts().left_queue, 2);
  EXPECT_EQ(running.size(), 1u);
}

TEST(AdmissionQueue, RaisedLimitsAdmitWaitersAtOnceAndLoweredOnesStopNothingRunning) {
  RunningRequests running(RunningLimits{.max_running = 1, .max_queued = 4, .queue_timeout = 60000ms});
  ASSERT_TRUE(running.add("", "r1").ok());
  auto waiting = std::async(std::launch::async, [&] { return running.add("", "r2"); });
  ASSERT_TRUE(queued_within(running, 1));
  running.set_limits(RunningLimits{.max_running = 2, .max_queued = 4, .queue_timeout = 60000ms});
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
  // Lowered below what runs: both keep running, and a new request finds no room.
  running.set_limits(RunningLimits{.max_running = 1, .max_queued = 0, .queue_timeout = 60000ms});
  EXPECT_EQ(running.size(), 2u);
  EXPECT_EQ(running.add("", "r3").status().code(), absl::StatusCode::kResourceExhausted);
  running.remove("", "r1");
  EXPECT_EQ(running.add("", "r4").status().code(), absl::StatusCode::kResourceExhausted);
  running.remove("", "r2");
  EXPECT_TRUE(running.add("", "r5").ok());
  EXPECT_EQ(running.limits().max_running, 1u);
}

// The asynchronous core: each callback is called exactly once — at once when there is room, from
// the thread that frees a slot, from the queue's deadline thread, or from leave_queue().
TEST(AdmissionQueue, AsyncCallbacksComeOnceFromWhoeverEndsTheWait) {
  RunningRequests running(RunningLimits{.max_running = 1, .max_queued = 3, .queue_timeout = 300ms});
  struct Answer {
    std::promise<absl::StatusOr<RunningRequest>> promise;
    std::thread::id on;
    std::atomic<int> calls{0};
  };
  const auto async_add = [&](const std::string& id, Answer& a) {
    return running.add_async("", id, [&a](absl::StatusOr<RunningRequest> r) {
      a.on = std::this_thread::get_id();
      ++a.calls;
      a.promise.set_value(std::move(r));
    });
  };
  Answer first, freed, timed_out, left;
  EXPECT_EQ(async_add("first", first), 0u) << "room: answered at once, no ticket";
  ASSERT_TRUE(first.promise.get_future().get().ok());
  EXPECT_EQ(first.on, std::this_thread::get_id());

  const std::uint64_t t_freed = async_add("freed", freed);
  const std::uint64_t t_timed_out = async_add("timed-out", timed_out);
  const std::uint64_t t_left = async_add("left", left);
  EXPECT_NE(t_freed, 0u);
  EXPECT_NE(t_timed_out, 0u);
  EXPECT_NE(t_left, 0u);
  EXPECT_EQ(running.queued(), 3u);

  // The client of "left" goes away: CANCELLED, on this thread; a second leave does nothing.
  auto left_future = left.promise.get_future();
  running.leave_queue(t_left);
  running.leave_queue(t_left);
  ASSERT_EQ(left_future.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(left_future.get().status().code(), absl::StatusCode::kCancelled);

  // A slot frees: the earliest waiter runs, answered on the thread that freed it.
  auto freed_future = freed.promise.get_future();
  running.remove("", "first");
  ASSERT_EQ(freed_future.wait_for(0s), std::future_status::ready);
  EXPECT_TRUE(freed_future.get().ok());
  EXPECT_EQ(freed.on, std::this_thread::get_id());
  running.leave_queue(t_freed);  // admitted already: nothing happens

  // Nothing frees for the last one: the deadline thread refuses it.
  auto timed_out_future = timed_out.promise.get_future();
  ASSERT_EQ(timed_out_future.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(timed_out_future.get().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(timed_out.on, std::this_thread::get_id());
  EXPECT_EQ(first.calls + freed.calls + timed_out.calls + left.calls, 4);
  const AdmissionCounts c = running.counts();
  EXPECT_EQ(c.admitted, 2);
  EXPECT_EQ(c.admitted_after_wait, 1);
  EXPECT_EQ(c.queue_timeout, 1);
  EXPECT_EQ(c.left_queue, 1);
  EXPECT_EQ(running.queued(), 0u);
}

}  // namespace
}  // namespace baton::router
