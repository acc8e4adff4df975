// The scheduler's speculation rules, on requests made by hand: a verification is scheduled with
// all of its drafts or not at all (never trimmed to the budget), a request left out goes first
// next step (no starvation), and with speculation a preempted request recomputes up to its
// pending token only.
#include "engine/scheduler.h"

#include "gtest/gtest.h"

namespace baton {
namespace {

// A request that has computed its prompt and one output token except the newest (decoding).
std::unique_ptr<Request> decoding_request(const std::string& id, KvBlockPool& pool, std::vector<std::int32_t> drafts) {
  auto r = std::make_unique<Request>(1, id, std::vector<std::int32_t>{1, 2, 3, 4}, SamplingParams{}, 0, 16,
                                     EngineClock::now());
  r->tokens.push_back(5);
  r->num_computed = 4;
  EXPECT_TRUE(r->blocks.grow_to(pool, 4));
  r->drafts = std::move(drafts);
  r->state = RequestState::kRunning;
  return r;
}

TEST(Scheduler, AVerificationKeepsAllItsDraftsOrWaitsItsTurn) {
  KvBlockPool pool(16, 16);
  SchedulerConfig c;
  c.max_num_batched_tokens = 9;  // one verification of 4 drafts (5 tokens) fits, two do not
  Scheduler s(c, pool, /*speculative=*/true);
  auto a = decoding_request("a", pool, {7, 8, 9, 10});
  auto b = decoding_request("b", pool, {7, 8, 9, 10});
  s.add_ready(a.get());
  s.add_ready(b.get());
  std::vector<std::string> order;
  for (int step = 0; step < 4; ++step) {
    const SchedulerOutput out = s.schedule();
    ASSERT_EQ(out.chunks.size(), 1u) << "step " << step;
    EXPECT_EQ(out.chunks[0].num_drafts, 4) << "drafts were trimmed to the budget";
    EXPECT_EQ(out.chunks[0].num_tokens, 5);
    order.push_back(out.chunks[0].request->id);
    // The engine would verify and roll back; here the request simply stays as it was.
    out.chunks[0].request->blocks.shrink_to(pool, out.chunks[0].request->num_computed);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "a", "b"})) << "a request left out must go first next step";
}

TEST(Scheduler, WithSpeculationAPreemptedRequestRecomputesUpToItsPendingToken) {
  KvBlockPool pool(16, 16);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  for (const bool speculative : {false, true}) {
    Scheduler s(c, pool, speculative);
    auto r = std::make_unique<Request>(1, "r", std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, SamplingParams{}, 0, 16,
                                       EngineClock::now());
    r->tokens.insert(r->tokens.end(), {7, 8});  // two output tokens; recompute after a preemption
    r->num_preemptions = 1;
    s.add(r.get());
    const SchedulerOutput out = s.schedule();
    ASSERT_EQ(out.chunks.size(), 1u);
    if (speculative) {
      EXPECT_EQ(out.chunks[0].num_tokens, 7) << "stops before the pending token, which is verified with drafts";
      EXPECT_FALSE(out.chunks[0].samples);
    } else {
      EXPECT_EQ(out.chunks[0].num_tokens, 8);
      EXPECT_TRUE(out.chunks[0].samples);
    }
    s.remove(r.get());
    EXPECT_EQ(pool.num_in_use(), 0);
  }
}

}  // namespace
}  // namespace baton
