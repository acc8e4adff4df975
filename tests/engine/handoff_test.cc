// Prefill/decode hand-off between two engines, and seeds that mean the same tokens everywhere:
//   - a request prefilled by a prefill-role engine (k = 1) and committed into a decode-role engine
//     (k = 4) yields exactly the tokens one colocated engine yields, for no speculation and every
//     method, greedy and seeded sampling — with the decode engine's pools poisoned first, so KV
//     that was not transferred (layer by layer through the engine's callback) cannot pass; and
//     again with both engines' memory acting like a GPU's, where the KV travels through the pools'
//     host mirrors (their copies from and to the pools are what is checked);
//   - 20 seeded sampled requests per method give the same tokens alone, in a busy batch under a
//     token budget of 9, and through the hand-off (and, for one-hot drafts, the tokens of plain
//     sampling without speculation);
//   - leases, reservations and releases never leak a block; bad records are refused and release
//     their reservation; aborts of parked or reserved requests report a final output;
//   - the KV layout fingerprint round-trips and names what differs.
#include <map>
#include <random>

#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/disaggregated.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/spec_methods.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using testing::fixture_path;
using testing::Job;
using testing::method_cases;
using testing::MethodCase;
using testing::pool_named;
using testing::run_disaggregated;
using testing::run_jobs;
using Tokens = std::map<std::string, std::vector<std::int32_t>>;

constexpr int kDecodeK = 4;

struct EngineSetup {
  std::string target = "llama-f32";
  std::optional<SpeculativeConfig> spec;
  NodeRole role = NodeRole::kColocated;
  std::int32_t budget = 256;
  std::int32_t max_seqs = 16;
  // The CPU acting like a GPU whose memory the host cannot read: a P/D engine's KV then leaves
  // and arrives through its pools' host mirrors.
  bool discrete_memory = false;
  EngineHooks hooks;
};

std::unique_ptr<Engine> make_engine(const EngineSetup& s) {
  EngineConfig c;
  c.model_dir = fixture_path(s.target);
  c.backend.num_threads = 2;
  c.kv_cache_bytes = 8 << 20;
  c.scheduler.max_num_batched_tokens = s.budget;
  c.scheduler.max_num_seqs = s.max_seqs;
  c.speculative = s.spec;
  c.role = s.role;
  c.backend.cpu_discrete_memory = s.discrete_memory;
  auto e = Engine::create(c, s.hooks);
  BATON_CHECK(e.ok(), e.status().ToString());
  return std::move(*e);
}

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

// Prompts with repeated motifs (so n-gram and suffix drafts match) and without.
std::vector<std::int32_t> prompt_for(std::mt19937& rng, std::int32_t vocab, int repeats) {
  std::vector<std::int32_t> motif(3 + rng() % 5), prompt;
  for (auto& t : motif) t = static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3));
  for (int r = 0; r <= repeats; ++r) prompt.insert(prompt.end(), motif.begin(), motif.end());
  prompt.push_back(static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3)));
  return prompt;
}

std::vector<Job> greedy_jobs(std::int32_t vocab, int n, const std::string& prefix) {
  std::mt19937 rng(17);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = prefix + std::to_string(i);
    j.prompt = prompt_for(rng, vocab, i % 3);
    j.params.temperature = 0;
    j.params.max_tokens = 10 + i * 2;
    j.params.ignore_eos = i % 2 == 0;
    if (i == 3) j.params.repetition_penalty = 1.3f;
    jobs.push_back(j);
  }
  return jobs;
}

std::vector<Job> seeded_jobs(std::int32_t vocab, int n) {
  std::mt19937 rng(29);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = "seed" + std::to_string(i);
    j.prompt = prompt_for(rng, vocab, 1 + i % 2);
    j.params.temperature = i % 3 == 0 ? 1.0f : 0.8f;
    if (i % 2 == 1) j.params.top_p = 0.9f;
    if (i % 5 == 4) j.params.frequency_penalty = 0.5f;
    j.params.seed = 1000 + static_cast<std::uint64_t>(i);
    j.params.max_tokens = 12;
    j.params.ignore_eos = true;
    if (i % 4 == 0) j.params.logprobs = 2;
    jobs.push_back(j);
  }
  return jobs;
}

void expect_no_blocks_held(const Engine& e, const std::string& what) {
  for (const KvPoolInfo& p : e.kv_pools()) {
    EXPECT_EQ(p.used, 0) << what << ": " << p.name << " pool still holds blocks";
    EXPECT_EQ(p.reserved, 0) << what << ": " << p.name << " pool";
  }
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
