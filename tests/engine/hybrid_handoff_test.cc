// A hybrid model (the Qwen3-Next fixtures) across a prefill and a decode engine in one process:
// the hand-off carries the recurrent state after the prompt (one slot of P's state group, every
// DeltaNet layer, into the same slot of D's reserved group) beside the KV, so disaggregated
// tokens equal colocated ones, greedy and seeded, with no speculation and with n-gram drafts at
// the same k on both sides; a P and a D of different k do not pair (their slot layouts differ);
// and every block and state group returns to its pool, on the release and lease paths too.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/disaggregated.h"
#include "tests/engine/handoff_engines.h"

namespace baton {
namespace {

using testing::EngineSetup;
using testing::greedy_jobs;
using testing::make_engine;
using testing::run_disaggregated;
using testing::run_jobs;
using testing::seeded_jobs;

SpeculativeConfig ngram(int k, NodeRole role) {
  auto c = SpeculativeConfig::parse(
      R"({"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3, "num_speculative_tokens": )" +
          std::to_string(k) + "}",
      role, /*model_has_recurrent_layers=*/true);
  BATON_CHECK(c.ok(), c.status().ToString());
  return *c;
}

void expect_state_groups_free(const Engine& e, const std::string& what) {
  ASSERT_NE(e.state_groups(), nullptr) << what;
  EXPECT_EQ(e.state_groups()->num_free(), e.state_groups()->num_groups()) << what << ": state groups still held";
}

class HybridHandoff : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(HybridHandoff, DisaggregatedTokensEqualColocatedTokens) {
  const auto& [target, k] = GetParam();
  EngineSetup colocated{target}, prefill{target}, decode{target};
  prefill.role = NodeRole::kPrefill;
  decode.role = NodeRole::kDecode;
  if (k > 0) {  // the P/D rule's hybrid branch: the same k on both sides
    colocated.spec = ngram(k, NodeRole::kColocated);
    prefill.spec = ngram(k, NodeRole::kPrefill);
    decode.spec = ngram(k, NodeRole::kDecode);
  }
  auto c = make_engine(colocated);
  auto p = make_engine(prefill);
  auto d = make_engine(decode);
  testing::poison_pools(*d);  // a state or KV byte that never arrived is NaN
  const std::int32_t vocab = c->model_config().vocab_size;
  std::vector<testing::Job> jobs = greedy_jobs(vocab, 6, "g");
  for (const testing::Job& j : seeded_jobs(vocab, 4)) jobs.push_back(j);
  jobs.back().params.max_tokens = 1;  // finishes on P: its reservation (and state group) is released

  const auto want = run_jobs(*c, jobs);
  const auto got = run_disaggregated(*p, *d, jobs);
  for (const testing::Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << target << " k=" << k << " " << j.id;
  EXPECT_EQ(d->stats().handoffs_committed, static_cast<std::int64_t>(jobs.size()) - 1);
  if (k > 0) {
    EXPECT_EQ(d->spec_stats()->num_accepted_tokens, c->spec_stats()->num_accepted_tokens);
  }
  testing::expect_no_blocks_held(*p, "prefill engine");
  testing::expect_no_blocks_held(*d, "decode engine");
  expect_state_groups_free(*p, "prefill engine");
  expect_state_groups_free(*d, "decode engine");
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HybridHandoff,
                         ::testing::Combine(::testing::Values("qwen3-next-f32", "qwen3-next-bf16", "nemotron-h-f32"),
                                            ::testing::Values(0, 1, 3)),
                         [](const auto& p) {
                           return testing::test_name_for(std::get<0>(p.param)) + "_k" +
                                  std::to_string(std::get<1>(p.param));
                         });

// Qwen3-Next's MTP on both sides (the same k): the hand-off carries the head's KV and features
// and the target's recurrent state together.
TEST(HybridHandoffMtp, DisaggregatedTokensEqualColocatedTokens) {
  const std::string target = "qwen3-next-f32";
  const auto mtp = [](NodeRole role) {
    auto c = SpeculativeConfig::parse(R"({"method": "mtp", "num_speculative_tokens": 2, "model": ")" +
                                          testing::fixture_path("spec/mtp-next-qwen3-next-f32") + "\"}",
                                      role, /*model_has_recurrent_layers=*/true);
    BATON_CHECK(c.ok(), c.status().ToString());
    return *c;
  };
  EngineSetup colocated{target}, prefill{target}, decode{target};
  prefill.role = NodeRole::kPrefill;
  decode.role = NodeRole::kDecode;
  colocated.spec = mtp(NodeRole::kColocated);
  prefill.spec = mtp(NodeRole::kPrefill);
  decode.spec = mtp(NodeRole::kDecode);
  auto c = make_engine(colocated);
  auto p = make_engine(prefill);
  auto d = make_engine(decode);
  testing::poison_pools(*d);
  const std::int32_t vocab = c->model_config().vocab_size;
  std::vector<testing::Job> jobs = greedy_jobs(vocab, 5, "g");
  for (const testing::Job& j : seeded_jobs(vocab, 3)) jobs.push_back(j);
  const auto want = run_jobs(*c, jobs);
  const auto got = run_disaggregated(*p, *d, jobs);
  for (const testing::Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << j.id;
  EXPECT_EQ(d->spec_stats()->num_draft_tokens, c->spec_stats()->num_draft_tokens);
  EXPECT_EQ(d->spec_stats()->num_accepted_tokens, c->spec_stats()->num_accepted_tokens);
  testing::expect_no_blocks_held(*p, "prefill engine");
  testing::expect_no_blocks_held(*d, "decode engine");
  expect_state_groups_free(*p, "prefill engine");
  expect_state_groups_free(*d, "decode engine");
}

// The hybrid branch of the P/D rule, at the layout: P with k = 1 and D with k = 2 keep 2 and 3
// slots per request, so their fingerprints differ and nothing moves between them.
TEST(HybridHandoffRule, PAndDOfDifferentKDoNotPair) {
  EngineSetup prefill{"qwen3-next-f32"}, decode{"qwen3-next-f32"};
  prefill.role = NodeRole::kPrefill;
  decode.role = NodeRole::kDecode;
  prefill.spec = ngram(1, NodeRole::kPrefill);
  decode.spec = ngram(2, NodeRole::kDecode);
  auto p = make_engine(prefill);
  auto d = make_engine(decode);
  const absl::Status s = d->layout_fingerprint().check_compatible(p->layout_fingerprint());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("recurrent-state slots 3 here vs 2 on the peer"));
  // And the rule itself names the hybrid branch.
  const absl::Status rule = pd_compatible(*prefill.spec, *decode.spec, /*model_has_recurrent_layers=*/true);
  ASSERT_FALSE(rule.ok());
  EXPECT_THAT(std::string(rule.message()), ::testing::HasSubstr("must use the same num_speculative_tokens"));
}

// Released, expired and refused hand-offs give their state groups back on both sides.
TEST(HybridHandoffLeases, ReleasesAndRefusalsFreeTheStateGroups) {
  EngineSetup prefill{"qwen3-next-f32"}, decode{"qwen3-next-f32"};
  prefill.role = NodeRole::kPrefill;
  decode.role = NodeRole::kDecode;
  decode.max_seqs = 2;
  auto p = make_engine(prefill);
  auto d = make_engine(decode);
  // D has two groups: a third reservation is refused, naming why; a release frees one.
  ASSERT_TRUE(d->reserve("a", 5).ok());
  ASSERT_TRUE(d->reserve("b", 5).ok());
  auto third = d->reserve("c", 5);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()), ::testing::HasSubstr("needs a recurrent state group"));
  ASSERT_TRUE(d->release("a").ok());
  ASSERT_TRUE(d->reserve("c", 5).ok());
  // A commit whose record names no state slot is refused and frees the reservation's group.
  HandoffRecord bad;
  bad.request_id = "c";
  bad.prompt = {5, 6, 7, 8, 9};
  bad.first_token = 3;
  bad.kv_blocks = {0};
  bad.params.max_tokens = 4;
  const absl::Status refused = d->commit("c", bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("recurrent state slot is -1"));
  ASSERT_TRUE(d->release("b").ok());
  expect_state_groups_free(*d, "decode engine");

  // P parks a prefilled request with its group until released.
  AddRequestOptions o;
  o.prefill_only = true;
  SamplingParams sp;
  sp.max_tokens = 4;
  ASSERT_TRUE(p->add_request("x", {5, 6, 7, 8, 9, 10}, sp, o).ok());
  while (p->has_unfinished()) {
    auto outs = p->step();
    ASSERT_TRUE(outs.ok());
    bool parked = false;
    for (const RequestOutput& out : *outs) {
      if (out.handoff) {
        EXPECT_GE(out.handoff->state_group, 0);
        EXPECT_GE(out.handoff->state_slot, 0);
        parked = true;
      }
    }
    if (parked) break;
  }
  EXPECT_EQ(p->state_groups()->num_free(), p->state_groups()->num_groups() - 1);
  ASSERT_TRUE(p->release("x").ok());
  expect_state_groups_free(*p, "prefill engine");
}

// The recurrent state is one more pool a transport registers: after the KV pools, one region with
// a (layer, unit) geometry, a unit being one slot of one group, whose offsets are exactly where the
// forward pass keeps that state (StateCache::span); a write that leaves a unit has no unit.
TEST(HybridStatePool, TheStateIsOnePoolWithComputableSpans) {
  EngineSetup s{"qwen3-next-f32"};
  s.spec = ngram(2, NodeRole::kColocated);
  auto e = make_engine(s);
  const std::vector<KvPoolInfo> pools = e->kv_pools();
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].name, "target");
  const KvPoolInfo& state = pools[1];
  ASSERT_EQ(state.name, "state");
  ASSERT_EQ(state.state, e->state_cache());
  EXPECT_EQ(state.cache, nullptr);
  const StateCache& cache = *e->state_cache();
  const StateCacheLayout& l = cache.layout();
  EXPECT_EQ(l.slots, 3);
  EXPECT_EQ(state.num_blocks, cache.num_groups());
  EXPECT_EQ(state.free, cache.num_groups());
  EXPECT_EQ(state.transfer.base, cache.region().base);
  EXPECT_EQ(state.geometry.region_bytes(), cache.region().bytes);
  for (std::int32_t layer = 0; layer < l.num_layers; ++layer) {
    for (const auto& [group, slot] : {std::pair{0, 0}, std::pair{1, 2}, std::pair{cache.num_groups() - 1, 1}}) {
      const KvSpan span = cache.span(layer, group, slot);
      const std::int32_t unit = group * l.slots + slot;
      EXPECT_EQ(state.geometry.offset(layer, unit), span.offset);
      EXPECT_EQ(span.bytes, state.geometry.unit_bytes);
      EXPECT_EQ(state.geometry.unit_of(span.offset, span.bytes), unit);
      EXPECT_EQ(static_cast<char*>(cache.slot(layer, group, slot).data), static_cast<char*>(state.transfer.base) + span.offset);
    }
  }
  EXPECT_EQ(state.geometry.unit_of(state.geometry.unit_bytes - 4, 8), std::nullopt);  // crosses into the next slot
  EXPECT_EQ(state.geometry.unit_of(state.geometry.region_bytes(), 4), std::nullopt);  // past the region
  EXPECT_EQ(pools[0].geometry.offset(1, 2), static_cast<std::uint64_t>(pools[0].cache->span(1, 2).offset));
}

}  // namespace
}  // namespace baton
