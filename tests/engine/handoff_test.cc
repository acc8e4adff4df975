// Prefill/decode hand-off between two engines, and seeds that mean the same tokens everywhere:
//   - a request prefilled by a prefill-role engine (k = 1) and committed into a decode-role engine
//     (k = 4) yields exactly the tokens one colocated engine yields, for no speculation and every
//     method, greedy and seeded sampling — with the decode engine's pools poisoned first, so KV
//     that was not transferred (layer by layer through the engine's callback) cannot pass; and
//     again with both engines' memory acting like a GPU's, where the KV travels through the pools'
//     host mirrors (their copies from and to the pools are what is checked);
//   - 20 seeded sampled requests per method give the same tokens alone, in a busy batch under a
//     token budget of 9, and through the hand-off (and, for one-hot drafts, the tokens of plain
//     sampling without speculation).
// Leases, reservations, the layout fingerprint and the pools' regions: handoff_leases_test.cc.
#include <map>
#include <random>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/disaggregated.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/handoff_engines.h"
#include "tests/engine/spec_methods.h"

namespace baton {
namespace {

using testing::Job;
using testing::method_cases;
using testing::MethodCase;
using testing::run_disaggregated;
using testing::run_jobs;
using Tokens = std::map<std::string, std::vector<std::int32_t>>;
using testing::EngineSetup;
using testing::expect_no_blocks_held;
using testing::greedy_jobs;
using testing::kDecodeK;
using testing::make_engine;
using testing::seeded_jobs;

// The three engines of a method: colocated and decode with k = 4, prefill with k = 1.
struct Trio {
  EngineSetup colocated, prefill, decode;
};

Trio trio_for(const MethodCase* m) {
  Trio t;
  for (EngineSetup* s : {&t.colocated, &t.prefill, &t.decode}) s->target = m ? m->target : "llama-f32";
  t.prefill.role = NodeRole::kPrefill;
  t.decode.role = NodeRole::kDecode;
  if (m != nullptr) {
    t.colocated.spec = m->config(kDecodeK);
    t.prefill.spec = m->config(1, NodeRole::kPrefill);
    t.decode.spec = m->config(kDecodeK, NodeRole::kDecode);
  }
  return t;
}



// ---------------------------------------------------------------------------------------------
// The round trip, per method

class Handoff : public ::testing::TestWithParam<int> {
 protected:
  // -1: no speculation.
  const MethodCase* method() {
    if (GetParam() < 0) return nullptr;
    cases_ = method_cases();
    return &cases_[static_cast<std::size_t>(GetParam())];
  }
  std::vector<MethodCase> cases_;
};

std::string method_label(int i) { return i < 0 ? std::string("none") : method_cases()[static_cast<std::size_t>(i)].label; }

TEST_P(Handoff, DisaggregatedTokensEqualColocatedTokens) {
  const MethodCase* m = method();
  Trio t = trio_for(m);
  auto colocated = make_engine(t.colocated);
  auto prefill = make_engine(t.prefill);
  auto decode = make_engine(t.decode);
  testing::poison_pools(*decode);
  const std::int32_t vocab = colocated->model_config().vocab_size;
  std::vector<Job> jobs = greedy_jobs(vocab, 6, "g");
  for (const Job& j : seeded_jobs(vocab, 4)) jobs.push_back(j);
  jobs.back().params.max_tokens = 1;  // finishes on the prefill engine: its reservation is released

  const Tokens want = run_jobs(*colocated, jobs);
  const Tokens got = run_disaggregated(*prefill, *decode, jobs);
  for (const Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << method_label(GetParam()) << " " << j.id;
  EXPECT_EQ(prefill->stats().handoffs_exported, static_cast<std::int64_t>(jobs.size()) - 1);
  EXPECT_EQ(decode->stats().handoffs_committed, static_cast<std::int64_t>(jobs.size()) - 1);
  expect_no_blocks_held(*prefill, "prefill engine");
  expect_no_blocks_held(*decode, "decode engine");
  if (m != nullptr) {
    EXPECT_GT(decode->spec_stats()->num_draft_tokens, 0) << "the decode engine never speculated";
    // The decode engine drafts from what the hand-off carried (head KV, target features, n-gram
    // history) exactly what the colocated engine drafts from its own: a lost or stale part would
    // lose acceptances, not tokens.
    EXPECT_EQ(decode->spec_stats()->num_draft_tokens, colocated->spec_stats()->num_draft_tokens) << method_label(GetParam());
    EXPECT_EQ(decode->spec_stats()->num_accepted_tokens, colocated->spec_stats()->num_accepted_tokens)
        << method_label(GetParam());
  }

  // The same through host mirrors, with every pool and mirror poisoned: a layer's rows missing
  // from the prefill mirror, or a block not moved from the decode mirror into its pool, shows.
  t.prefill.discrete_memory = t.decode.discrete_memory = true;
  auto mirrored_prefill = make_engine(t.prefill);
  auto mirrored_decode = make_engine(t.decode);
  for (Engine* e : {mirrored_prefill.get(), mirrored_decode.get()}) {
    for (const KvPoolInfo& p : e->kv_pools()) {
      ASSERT_NE(p.transfer.base, p.cache->region().base) << p.name << " pool has no host mirror";
    }
    testing::poison_pools(*e);
  }
  const Tokens via_mirrors = run_disaggregated(*mirrored_prefill, *mirrored_decode, jobs);
  for (const Job& j : jobs) EXPECT_EQ(via_mirrors.at(j.id), want.at(j.id)) << method_label(GetParam()) << " " << j.id;
  expect_no_blocks_held(*mirrored_decode, "decode engine (host mirrors)");
  if (m != nullptr) {
    EXPECT_EQ(mirrored_decode->spec_stats()->num_accepted_tokens, colocated->spec_stats()->num_accepted_tokens)
        << method_label(GetParam());
  }
  // The same with the transports in the pools' (discrete) memory, as NCCL moves it: no mirrors,
  // the decode pools poisoned, and commit must take the blocks as the transport left them.
  t.prefill.kv_transfer_in_device_memory = t.decode.kv_transfer_in_device_memory = true;
  auto device_prefill = make_engine(t.prefill);
  auto device_decode = make_engine(t.decode);
  for (Engine* e : {device_prefill.get(), device_decode.get()}) {
    ASSERT_FALSE(e->kv_host_mirrored());
    for (const KvPoolInfo& p : e->kv_pools()) ASSERT_EQ(p.transfer.base, p.cache->region().base) << p.name;
  }
  testing::poison_pools(*device_decode);
  const Tokens in_device_memory = run_disaggregated(*device_prefill, *device_decode, jobs);
  for (const Job& j : jobs) {
    EXPECT_EQ(in_device_memory.at(j.id), want.at(j.id)) << method_label(GetParam()) << " " << j.id << " (device memory)";
  }
  expect_no_blocks_held(*device_decode, "decode engine (device memory)");
  t.prefill.kv_transfer_in_device_memory = t.decode.kv_transfer_in_device_memory = false;

  // BF16 KV caches on all three engines (target and draft pools; half the bytes per block move):
  // the disaggregated pair gives the colocated engine's tokens and acceptances again.
  for (EngineSetup* e : {&t.colocated, &t.prefill, &t.decode}) e->kv_cache_dtype = DType::kBF16;
  t.prefill.discrete_memory = t.decode.discrete_memory = false;
  auto bf16_colocated = make_engine(t.colocated);
  auto bf16_prefill = make_engine(t.prefill);
  auto bf16_decode = make_engine(t.decode);
  testing::poison_pools(*bf16_decode);
  const Tokens bf16_want = run_jobs(*bf16_colocated, jobs);
  const Tokens bf16_got = run_disaggregated(*bf16_prefill, *bf16_decode, jobs);
  for (const Job& j : jobs) EXPECT_EQ(bf16_got.at(j.id), bf16_want.at(j.id)) << method_label(GetParam()) << " BF16 KV " << j.id;
  expect_no_blocks_held(*bf16_decode, "decode engine (BF16 KV)");
  if (m != nullptr) {
    EXPECT_EQ(bf16_decode->spec_stats()->num_accepted_tokens, bf16_colocated->spec_stats()->num_accepted_tokens)
        << method_label(GetParam()) << " BF16 KV";
  }
}

TEST(HandoffPrefixCache, BlocksFromThePrefillPrefixCacheTravelToo) {
  // Prompts sharing a 40-token prefix, handed off one after another: the later ones hit the
  // prefill engine's prefix cache, and those blocks must reach the decode engine as well.
  const Trio t = trio_for(nullptr);
  auto colocated = make_engine(t.colocated);
  auto prefill = make_engine(t.prefill);
  auto decode = make_engine(t.decode);
  testing::poison_pools(*decode);
  std::mt19937 rng(5);
  std::vector<std::int32_t> prefix(40);
  for (auto& x : prefix) x = static_cast<std::int32_t>(3 + rng() % 300);
  std::vector<Job> jobs;
  for (int i = 0; i < 3; ++i) {
    Job j;
    j.id = "shared" + std::to_string(i);
    j.prompt = prefix;
    for (int e = 0; e <= i; ++e) j.prompt.push_back(static_cast<std::int32_t>(5 + i * 7 + e));
    j.params.temperature = 0;
    j.params.max_tokens = 8;
    j.params.ignore_eos = true;
    jobs.push_back(j);
  }
  const Tokens want = run_jobs(*colocated, jobs);
  const Tokens got = run_disaggregated(*prefill, *decode, jobs, /*one_at_a_time=*/true);
  for (const Job& j : jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << j.id;
  EXPECT_GT(prefill->stats().prefix_cache_hits, 0) << "the test meant to hit the prefix cache";
  expect_no_blocks_held(*prefill, "prefill engine");
  expect_no_blocks_held(*decode, "decode engine");

  // Through host mirrors, with prompts prefilled in chunks of 7 (rows that start mid-block). The
  // prefill mirror is poisoned after every hand-off, so the cached blocks must go down into it
  // again with the next record.
  Trio mirrored = t;
  mirrored.prefill.discrete_memory = mirrored.decode.discrete_memory = true;
  mirrored.prefill.budget = 7;
  auto mirrored_prefill = make_engine(mirrored.prefill);
  auto mirrored_decode = make_engine(mirrored.decode);
  testing::poison_pools(*mirrored_prefill);
  testing::poison_pools(*mirrored_decode);
  const auto poison_prefill_mirror = [&] {
    for (const KvPoolInfo& p : mirrored_prefill->kv_pools()) std::memset(p.transfer.base, 0xff, p.transfer.bytes);
  };
  const Tokens via_mirrors =
      run_disaggregated(*mirrored_prefill, *mirrored_decode, jobs, /*one_at_a_time=*/true, poison_prefill_mirror);
  for (const Job& j : jobs) EXPECT_EQ(via_mirrors.at(j.id), want.at(j.id)) << j.id << " (host mirrors)";
  EXPECT_GT(mirrored_prefill->stats().prefix_cache_hits, 0);
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, Handoff, ::testing::Range(-1, static_cast<int>(method_cases().size())),
                         [](const auto& p) { return method_label(p.param); });

// ---------------------------------------------------------------------------------------------
// Seeds

class Seeds : public Handoff {};

TEST_P(Seeds, SameTokensAloneInABusyBatchAndThroughTheHandoff) {
  const MethodCase* m = method();
  const Trio t = trio_for(m);
  auto plain_engine = make_engine(EngineSetup{t.colocated.target});
  const std::int32_t vocab = plain_engine->model_config().vocab_size;
  const std::vector<Job> seeded = seeded_jobs(vocab, 20);

  // Alone: one request at a time.
  auto alone_engine = make_engine(t.colocated);
  Tokens alone;
  for (const Job& j : seeded) alone[j.id] = run_jobs(*alone_engine, {j}).at(j.id);

  // Busy: all of them, with greedy requests in between, under a budget of 9 tokens a step (a
  // verification of 4 drafts takes 5).
  EngineSetup busy_setup = t.colocated;
  busy_setup.budget = 9;
  busy_setup.max_seqs = 8;
  auto busy_engine = make_engine(busy_setup);
  std::vector<Job> busy_jobs = greedy_jobs(vocab, 6, "filler");
  busy_jobs.insert(busy_jobs.begin() + 3, seeded.begin(), seeded.end());
  const Tokens busy = run_jobs(*busy_engine, busy_jobs);

  auto prefill = make_engine(t.prefill);
  auto decode = make_engine(t.decode);
  const Tokens handed_off = run_disaggregated(*prefill, *decode, seeded);

  int differ_from_plain = 0;
  const Tokens plain = run_jobs(*plain_engine, seeded);
  for (const Job& j : seeded) {
    EXPECT_EQ(busy.at(j.id), alone.at(j.id)) << method_label(GetParam()) << " " << j.id << ": busy batch";
    EXPECT_EQ(handed_off.at(j.id), alone.at(j.id)) << method_label(GetParam()) << " " << j.id << ": hand-off";
    differ_from_plain += plain.at(j.id) != alone.at(j.id);
  }
  if (m == nullptr || !m->probabilistic) {
    // One-hot drafts are verified with plain sampling's own draws.
    EXPECT_EQ(differ_from_plain, 0) << method_label(GetParam());
  } else {
    // Sampled drafts change which draws decide the tokens (same law, other tokens).
    EXPECT_GT(differ_from_plain, 0) << method_label(GetParam());
  }
  if (m != nullptr) {
    EXPECT_GT(busy_engine->spec_stats()->num_draft_tokens, 0);
  }
  EXPECT_EQ(busy_engine->block_pool().num_in_use(), 0);
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, Seeds, ::testing::Range(-1, static_cast<int>(method_cases().size())),
                         [](const auto& p) { return method_label(p.param); });

}  // namespace
}  // namespace baton
