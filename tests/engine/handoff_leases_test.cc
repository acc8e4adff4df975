// Prefill/decode hand-off between two engines, the bookkeeping around it: leases, reservations and
// releases never leak a block; bad records are refused and release their reservation; aborts of
// parked or reserved requests report a final output; the KV layout fingerprint round-trips and
// names what differs; each pool is one region with computable spans; reservations a remote writer
// may still write are quarantined, never reused, until it is done. (The round trip of tokens
// is handoff_test.cc.)
#include <algorithm>
#include <map>
#include <random>

#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/disaggregated.h"
#include "tests/engine/handoff_engines.h"
#include "tests/engine/spec_methods.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using testing::EngineSetup;
using testing::expect_no_blocks_held;
using testing::greedy_jobs;
using testing::Job;
using testing::kDecodeK;
using testing::make_engine;
using testing::method_cases;
using testing::MethodCase;
using testing::pool_named;

// ---------------------------------------------------------------------------------------------
// Leases, reservations, releases

// A clock the test moves by hand.
struct ManualClock {
  EngineClock::time_point now = EngineClock::time_point{} + std::chrono::hours(1);
  EngineHooks hooks() {
    EngineHooks h;
    h.clock = [this] { return now; };
    return h;
  }
};

const FinishReason* finished_with(const std::vector<RequestOutput>& outs, const std::string& id) {
  for (const RequestOutput& o : outs) {
    if (o.request_id == id && o.finished) return &o.finish_reason;
  }
  return nullptr;
}

TEST(Leases, AnUnreleasedPrefillIsReclaimedAtItsDeadline) {
  ManualClock clock;
  EngineSetup s;
  s.role = NodeRole::kPrefill;
  s.hooks = clock.hooks();
  auto p = make_engine(s);
  const Job j = greedy_jobs(p->model_config().vocab_size, 1, "r")[0];
  ASSERT_TRUE(p->add_request(j.id, j.prompt, j.params, {.prefill_only = true}).ok());
  auto outs = p->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_EQ(outs->size(), 1u);
  ASSERT_TRUE((*outs)[0].handoff.has_value());
  EXPECT_FALSE((*outs)[0].finished);
  EXPECT_GT(p->block_pool().num_in_use(), 0);
  EXPECT_EQ(pool_named(*p, "target").reserved, p->block_pool().num_in_use());
  ASSERT_TRUE(p->next_deadline().has_value());

  clock.now += std::chrono::seconds(59);
  outs = p->step();
  ASSERT_TRUE(outs.ok());
  EXPECT_TRUE(outs->empty());
  EXPECT_GT(p->block_pool().num_in_use(), 0);

  clock.now += std::chrono::seconds(2);
  outs = p->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_EQ(outs->size(), 1u);
  EXPECT_EQ((*outs)[0].finish_reason, FinishReason::kError);
  EXPECT_THAT((*outs)[0].error, HasSubstr("lease"));
  EXPECT_EQ(p->block_pool().num_in_use(), 0);
  EXPECT_EQ(p->stats().lease_expiries, 1);
  EXPECT_FALSE(p->has_unfinished());
  EXPECT_EQ(p->release(j.id).code(), absl::StatusCode::kNotFound);
}

TEST(Leases, AnUncommittedReservationIsReclaimedAtItsDeadline) {
  ManualClock clock;
  const MethodCase m = method_cases()[2];  // draft_model: it reserves draft KV too
  EngineSetup s;
  s.role = NodeRole::kDecode;
  s.spec = m.config(kDecodeK, NodeRole::kDecode);
  s.hooks = clock.hooks();
  auto d = make_engine(s);
  auto r = d->reserve("x", 40);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kv_blocks.size(), 3u);
  EXPECT_EQ(r->proposer_kv_positions, 40);
  EXPECT_EQ(r->proposer_blocks.size(), 3u);
  EXPECT_EQ(pool_named(*d, "target").used, 3);
  EXPECT_EQ(pool_named(*d, "draft").used, 3);
  clock.now += std::chrono::seconds(61);
  auto outs = d->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_NE(finished_with(*outs, "x"), nullptr);
  EXPECT_EQ(*finished_with(*outs, "x"), FinishReason::kError);
  expect_no_blocks_held(*d, "after expiry");
  HandoffRecord h;
  h.request_id = "x";
  EXPECT_EQ(d->commit("x", h).code(), absl::StatusCode::kNotFound);
}

TEST(Reservations, ABadRecordIsRefusedAndReleasesTheReservation) {
  EngineSetup s;
  s.role = NodeRole::kDecode;
  auto d = make_engine(s);
  const std::int32_t vocab = d->model_config().vocab_size;
  const auto refused = [&](const std::function<void(HandoffRecord&)>& spoil, const std::string& what) {
    auto r = d->reserve("y", 20);
    ASSERT_TRUE(r.ok()) << r.status();
    HandoffRecord h;
    h.request_id = "y";
    h.prompt.assign(20, 5);
    h.first_token = 6;
    h.kv_blocks = r->kv_blocks;
    spoil(h);
    const absl::Status c = d->commit("y", h);
    EXPECT_EQ(c.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(c.message(), HasSubstr(what));
    EXPECT_EQ(d->block_pool().num_in_use(), 0) << what;
    EXPECT_FALSE(d->has_unfinished()) << what;
  };
  refused([](HandoffRecord& h) { h.prompt.pop_back(); }, "prompt of 19 tokens");
  refused([&](HandoffRecord& h) { h.first_token = vocab; }, "first token");
  refused([&](HandoffRecord& h) { h.prompt[3] = -1; }, "prompt token 3");
  refused([](HandoffRecord& h) { h.kv_blocks.push_back(7); }, "KV blocks");
  refused([](HandoffRecord& h) { h.params.temperature = -1; }, "temperature");
  refused([](HandoffRecord& h) { h.request_id = "z"; }, "record is for request 'z'");
}

TEST(Reservations, RolesAndCapacityAreChecked) {
  auto colocated = make_engine(EngineSetup{});
  EXPECT_EQ(colocated->reserve("a", 8).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(colocated->add_request("a", {1, 2, 3}, SamplingParams{}, {.prefill_only = true}).code(),
            absl::StatusCode::kFailedPrecondition);
  EngineSetup ps;
  ps.role = NodeRole::kPrefill;
  auto prefill = make_engine(ps);
  EXPECT_EQ(prefill->add_request("a", {1, 2, 3}, SamplingParams{}).code(), absl::StatusCode::kFailedPrecondition);

  EngineSetup ds;
  ds.role = NodeRole::kDecode;
  auto d = make_engine(ds);
  const std::int32_t blocks = d->block_pool().num_blocks();
  std::vector<std::string> held;
  for (int i = 0;; ++i) {
    auto r = d->reserve("r" + std::to_string(i), 16 * 4);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_THAT(r.status().message(), HasSubstr("free"));
      break;
    }
    held.push_back(r->request_id);
  }
  EXPECT_EQ(static_cast<std::int32_t>(held.size()), blocks / 4);
  EXPECT_EQ(d->reserve(held[0], 8).status().code(), absl::StatusCode::kAlreadyExists);
  for (const std::string& id : held) ASSERT_TRUE(d->release(id).ok());
  EXPECT_EQ(d->block_pool().num_in_use(), 0);
}

TEST(Reservations, AbortOfAParkedOrReservedRequestReportsAndFrees) {
  EngineSetup ps;
  ps.role = NodeRole::kPrefill;
  auto p = make_engine(ps);
  const Job j = greedy_jobs(p->model_config().vocab_size, 1, "a")[0];
  ASSERT_TRUE(p->add_request(j.id, j.prompt, j.params, {.prefill_only = true}).ok());
  ASSERT_TRUE(p->step().ok());
  p->abort(j.id);
  auto outs = p->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_NE(finished_with(*outs, j.id), nullptr);
  EXPECT_EQ(*finished_with(*outs, j.id), FinishReason::kAbort);
  EXPECT_EQ(p->block_pool().num_in_use(), 0);

  EngineSetup ds;
  ds.role = NodeRole::kDecode;
  auto d = make_engine(ds);
  ASSERT_TRUE(d->reserve("b", 30).ok());
  d->abort("b");
  outs = d->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_NE(finished_with(*outs, "b"), nullptr);
  EXPECT_EQ(*finished_with(*outs, "b"), FinishReason::kAbort);
  EXPECT_EQ(d->block_pool().num_in_use(), 0);
  EXPECT_FALSE(d->has_unfinished());
}

// ---------------------------------------------------------------------------------------------
// Write grants: blocks a remote writer may still write are never reused

// The engine of a decode node whose reservations reserve draft KV too (draft_model).
std::unique_ptr<Engine> decode_engine_with_draft_kv(ManualClock& clock) {
  EngineSetup s;
  s.role = NodeRole::kDecode;
  s.spec = method_cases()[2].config(kDecodeK, NodeRole::kDecode);
  s.hooks = clock.hooks();
  return make_engine(s);
}

bool disjoint(const std::vector<BlockId>& a, const std::vector<BlockId>& b) {
  for (BlockId x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return false;
  }
  return true;
}

TEST(WriteGrants, AReleasedReservationWithAWriterKeepsItsBlocksUntilTheWriterIsDone) {
  ManualClock clock;
  auto d = decode_engine_with_draft_kv(clock);
  auto first = d->reserve("x", 40);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(d->grant_writes("x", 7).ok());
  EXPECT_EQ(d->write_grant_state(7), WriteGrantState::kReserved);
  ASSERT_TRUE(d->release("x").ok());

  // The request is gone (a commit finds nothing, the id is free), its blocks are not.
  EXPECT_EQ(d->write_grant_state(7), WriteGrantState::kQuarantined);
  HandoffRecord h;
  h.request_id = "x";
  EXPECT_EQ(d->commit("x", h).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pool_named(*d, "target").used, 3);
  EXPECT_EQ(pool_named(*d, "target").quarantined, 3);
  EXPECT_EQ(pool_named(*d, "draft").used, 3);
  EXPECT_EQ(d->stats().write_quarantines, 1);
  auto again = d->reserve("x", 40);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(disjoint(first->kv_blocks, again->kv_blocks));
  EXPECT_TRUE(disjoint(first->proposer_blocks, again->proposer_blocks));

  d->end_writes(7);
  EXPECT_EQ(d->write_grant_state(7), WriteGrantState::kNone);
  EXPECT_EQ(pool_named(*d, "target").used, 3);  // the new reservation only
  EXPECT_EQ(pool_named(*d, "target").quarantined, 0);
  EXPECT_EQ(pool_named(*d, "draft").used, 3);
  ASSERT_TRUE(d->release("x").ok());  // no grant: freed at once
  expect_no_blocks_held(*d, "after the writer was done");
}

TEST(WriteGrants, ExpiryAndAbortQuarantineTooAndTheQuarantineHasALimit) {
  ManualClock clock;
  auto d = decode_engine_with_draft_kv(clock);
  ASSERT_TRUE(d->reserve("expires", 40).ok());
  ASSERT_TRUE(d->grant_writes("expires", 1).ok());
  ASSERT_TRUE(d->reserve("aborted", 20).ok());
  ASSERT_TRUE(d->grant_writes("aborted", 2).ok());
  EXPECT_EQ(d->grant_writes("aborted", 3).code(), absl::StatusCode::kAlreadyExists);  // one writer per reservation
  EXPECT_EQ(d->grant_writes("nobody", 4).code(), absl::StatusCode::kNotFound);

  d->abort("aborted");
  clock.now += std::chrono::seconds(61);  // past the 60 s lease of "expires"
  auto outs = d->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_NE(finished_with(*outs, "aborted"), nullptr);
  EXPECT_EQ(*finished_with(*outs, "aborted"), FinishReason::kAbort);
  ASSERT_NE(finished_with(*outs, "expires"), nullptr);
  EXPECT_EQ(*finished_with(*outs, "expires"), FinishReason::kError);
  EXPECT_EQ(d->write_grant_state(1), WriteGrantState::kQuarantined);
  EXPECT_EQ(d->write_grant_state(2), WriteGrantState::kQuarantined);
  EXPECT_EQ(pool_named(*d, "target").used, 5);
  EXPECT_FALSE(d->has_unfinished());

  d->end_writes(2);  // the aborted one's writer is done
  EXPECT_EQ(pool_named(*d, "target").used, 3);

  // The other writer never says so: the blocks come back at the limit, not before.
  ASSERT_TRUE(d->next_deadline().has_value());
  clock.now = *d->next_deadline() - std::chrono::milliseconds(1);
  ASSERT_TRUE(d->step().ok());
  EXPECT_EQ(d->write_grant_state(1), WriteGrantState::kQuarantined);
  clock.now += std::chrono::milliseconds(1);
  ASSERT_TRUE(d->step().ok());
  EXPECT_EQ(d->write_grant_state(1), WriteGrantState::kNone);
  EXPECT_EQ(d->stats().write_quarantines_expired, 1);
  expect_no_blocks_held(*d, "after the quarantine's limit");
  EXPECT_FALSE(d->next_deadline().has_value());
}

TEST(WriteGrants, ACommitEndsTheGrantEvenWhenItIsRefused) {
  ManualClock clock;
  auto d = decode_engine_with_draft_kv(clock);
  auto r = d->reserve("y", 20);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(d->grant_writes("y", 9).ok());
  HandoffRecord h;
  h.request_id = "y";
  h.prompt.assign(19, 5);  // one token short: refused, and the reservation released
  h.kv_blocks = r->kv_blocks;
  EXPECT_EQ(d->commit("y", h).code(), absl::StatusCode::kInvalidArgument);
  // The sender commits once its writes are complete: nothing needs quarantine.
  EXPECT_EQ(d->write_grant_state(9), WriteGrantState::kNone);
  expect_no_blocks_held(*d, "after a refused commit");
}

// ---------------------------------------------------------------------------------------------
// The layout fingerprint

TEST(LayoutFingerprint, RoundTripsAndNamesTheFirstDifference) {
  const MethodCase m = method_cases()[2];  // draft_model
  EngineSetup a;
  a.spec = m.config(3);
  auto with_draft = make_engine(a);
  const KvLayoutFingerprint f = with_draft->layout_fingerprint();
  ASSERT_EQ(f.pools.size(), 2u);
  EXPECT_EQ(f.pools[0].name, "target");
  EXPECT_EQ(f.pools[1].name, "draft");
  auto parsed = KvLayoutFingerprint::parse(f.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, f);
  EXPECT_TRUE(f.check_compatible(*parsed).ok());
  // k does not change the layout: a prefill engine (k = 1) pairs with it.
  EngineSetup p;
  p.spec = m.config(1, NodeRole::kPrefill);
  p.role = NodeRole::kPrefill;
  EXPECT_TRUE(make_engine(p)->layout_fingerprint().check_compatible(f).ok());

  auto plain = make_engine(EngineSetup{});
  const absl::Status no_draft = plain->layout_fingerprint().check_compatible(f);
  EXPECT_EQ(no_draft.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_draft.message(), HasSubstr("\"draft\" pool"));

  EngineSetup q;
  q.target = "qwen2-f32";
  const absl::Status other_model = make_engine(q)->layout_fingerprint().check_compatible(plain->layout_fingerprint());
  EXPECT_THAT(other_model.message(), HasSubstr("\"target\" pool"));
  EXPECT_THAT(other_model.message(), HasSubstr("Qwen2ForCausalLM"));

  EXPECT_FALSE(KvLayoutFingerprint::parse("{\"version\": 1}").ok());
  EXPECT_THAT(KvLayoutFingerprint::parse("[1]").status().message(), HasSubstr("not a JSON object"));
}

TEST(KvMemory, EachPoolIsOneRegionWithComputableSpans) {
  const MethodCase m = method_cases()[3];  // eagle: a head pool
  EngineSetup s;
  s.spec = m.config(3);
  auto e = make_engine(s);
  for (const KvPoolInfo& p : e->kv_pools()) {
    const KvCacheLayout& l = p.cache->layout();
    const KvRegion r = p.cache->region();
    EXPECT_EQ(r.bytes, static_cast<std::size_t>(l.bytes_per_block()) * static_cast<std::size_t>(p.num_blocks)) << p.name;
    const std::size_t per = static_cast<std::size_t>(l.bytes_per_block_per_layer());
    const KvSpan last = p.cache->span(l.num_layers - 1, p.num_blocks - 1);
    EXPECT_EQ(last.offset + last.bytes, r.bytes) << p.name;
    EXPECT_EQ(p.cache->span(0, 1).offset, per);
    EXPECT_EQ(p.cache->span(1 % l.num_layers, 0).offset, (1 % l.num_layers) * p.cache->layer_stride());
    // The span is exactly where the forward pass reads that (layer, block).
    EXPECT_EQ(static_cast<char*>(p.cache->layer(l.num_layers - 1).data) + per * 2,
              static_cast<char*>(r.base) + p.cache->span(l.num_layers - 1, 2).offset);
  }
}


}  // namespace
}  // namespace baton
