// Hybrid targets (the Qwen3-Next fixtures: Gated DeltaNet layers with a recurrent state beside
// the KV cache) through the whole Engine: speculative decoding stays token-identical to plain
// decoding when drafts are accepted in full, rejected at the first token or rejected in the
// middle (an oracle proposer makes all three happen on purpose), with n-gram, suffix, MTP, EAGLE-3
// and (attention-only) draft-model drafts,
// with step graphs, and under preemption and chunked prefill; every state group and block comes
// back to its pool.
#include <map>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/forwarding_proposer.h"
#include "tests/engine/spec/spec_engine_support.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::Job;
using testing::jobs_for;
using testing::make_engine;
using testing::run;

// Drafts the plain greedy continuation it is given, with one token wrong at a place that moves
// from one proposal to the next: some verifications accept every draft, some reject the first,
// the others reject one in the middle.
class OracleProposer final : public testing::ForwardingProposer {
 public:
  OracleProposer(std::unique_ptr<Proposer> real, std::map<std::vector<std::int32_t>, std::vector<std::int32_t>> outputs,
                 std::int32_t vocab)
      : ForwardingProposer(std::move(real)), outputs_(std::move(outputs)), vocab_(vocab) {}

  absl::Status propose(std::span<ProposalRequest> batch) override {
    for (ProposalRequest& p : batch) {
      p.drafts->clear();
      const std::vector<std::int32_t> prompt(p.tokens.begin(), p.tokens.begin() + p.prompt_len);
      const auto it = outputs_.find(prompt);
      if (it == outputs_.end()) continue;
      const std::size_t done = p.tokens.size() - static_cast<std::size_t>(p.prompt_len);
      const std::size_t wrong = calls_[prompt]++ % static_cast<std::size_t>(p.max_drafts + 1);  // max_drafts: none
      for (std::size_t i = 0; i < static_cast<std::size_t>(p.max_drafts) && done + i < it->second.size(); ++i) {
        const std::int32_t t = it->second[done + i];
        p.drafts->push_back(i == wrong ? (t + 1) % vocab_ : t);
      }
    }
    return absl::OkStatus();
  }

 private:
  std::map<std::vector<std::int32_t>, std::vector<std::int32_t>> outputs_;
  std::map<std::vector<std::int32_t>, std::size_t> calls_;  // proposals so far, per prompt
  std::int32_t vocab_;
};

SpeculativeConfig spec_config(const std::string& json, int k) {
  auto c = SpeculativeConfig::parse(json + ", \"num_speculative_tokens\": " + std::to_string(k) + "}",
                                    NodeRole::kColocated);
  BATON_CHECK(c.ok(), c.status().ToString());
  return *c;
}

void expect_pools_empty(const Engine& e, const std::string& what) {
  EXPECT_EQ(e.block_pool().num_in_use(), 0) << what << ": blocks leaked";
  ASSERT_NE(e.state_groups(), nullptr);
  EXPECT_EQ(e.state_groups()->num_free(), e.state_groups()->num_groups()) << what << ": state groups leaked";
}

// Runs the jobs on a speculating engine: the greedy ones must give plain decoding's tokens, the
// engine must have drafted, and every block (the proposer's too) and state group must be free again.
template <typename Outputs>
void expect_plain_tokens(Engine& engine, const std::vector<Job>& jobs, const Outputs& expected, const std::string& what) {
  const auto got = run(engine, jobs);
  for (const Job& j : jobs) {
    if (j.params.greedy()) {
      EXPECT_EQ(got.at(j.id), expected.at(j.id)) << what << " " << j.id;
    }
  }
  EXPECT_GT(engine.spec_stats()->num_draft_tokens, 0) << what << ": never speculated";
  expect_pools_empty(engine, what);
  for (const KvPoolInfo& pool : engine.kv_pools()) EXPECT_EQ(pool.used, 0) << what << " " << pool.name;
}

class HybridSpec : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(HybridSpec, OracleDraftsAcceptedWhollyPartlyOrNotAtAllGiveThePlainTokens) {
  const auto& [target, k] = GetParam();
  auto plain = make_engine(target, std::nullopt);
  const std::int32_t vocab = plain->model_config().vocab_size;
  const std::vector<Job> jobs = jobs_for(vocab, /*include_sampled=*/false);
  const auto expected = run(*plain, jobs);
  expect_pools_empty(*plain, "plain");
  std::map<std::vector<std::int32_t>, std::vector<std::int32_t>> outputs;
  for (const Job& j : jobs) outputs[j.prompt] = expected.at(j.id);

  for (const GraphMode graphs : {GraphMode::kOff, GraphMode::kOn}) {
    EngineHooks hooks;
    hooks.wrap_proposer = [&](std::unique_ptr<Proposer> real) {
      return std::unique_ptr<Proposer>(std::make_unique<OracleProposer>(std::move(real), outputs, vocab));
    };
    auto engine = make_engine(target, spec_config(R"({"method": "ngram")", k), "auto", false, graphs, std::nullopt,
                              std::move(hooks));
    EXPECT_EQ(run(*engine, jobs), expected) << target << " k=" << k;
    const SpecDecodeStats& st = *engine->spec_stats();
    EXPECT_GT(st.num_accepted_tokens, 0) << "no draft was ever accepted";
    EXPECT_LT(st.num_accepted_tokens, st.num_draft_tokens) << "no draft was ever rejected";
    if (k > 1) {
      // Some verification accepted a draft and then rejected one (a rejection in the middle).
      EXPECT_GT(st.accepted_per_position[0], st.accepted_per_position[static_cast<std::size_t>(k - 1)]);
    }
    expect_pools_empty(*engine, target);
  }
}

TEST_P(HybridSpec, NgramAndSuffixDraftsGiveThePlainTokens) {
  const auto& [target, k] = GetParam();
  auto plain = make_engine(target, std::nullopt);
  const auto jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/true);
  const auto expected = run(*plain, jobs);
  for (const std::string method : {R"({"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3)",
                                   R"({"method": "suffix")"}) {
    auto engine = make_engine(target, spec_config(method, k));
    expect_plain_tokens(*engine, jobs, expected, method + " k=" + std::to_string(k));
  }
}

// Qwen3-Next's own MTP module (gated attention, experts, zero-centred norms; its own KV, no
// recurrent state) drafting for the hybrid target: the fixture's head, and the bundled model's
// trained one, from its own checkpoint (`mtp.*` beside the target's weights; no `model`).
TEST_P(HybridSpec, MtpDraftsGiveThePlainTokens) {
  const auto& [target, k] = GetParam();
  const bool bundled = target == testing::kBundledHybrid;
  if (target != "qwen3-next-f32" && !bundled) GTEST_SKIP() << "the MTP fixture head is qwen3-next-f32's";
  auto plain = make_engine(target, std::nullopt);
  const auto jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/true);
  const auto expected = run(*plain, jobs);
  auto engine = make_engine(
      target, spec_config(bundled ? std::string(R"({"method": "mtp")")
                                  : R"({"method": "mtp", "model": ")" + fixture_path("spec/mtp-next-qwen3-next-f32") + "\"",
                          k));
  expect_plain_tokens(*engine, jobs, expected, "mtp k=" + std::to_string(k));
}

// Attention-only proposers for the hybrid target: an EAGLE-3 head reading the aux hidden states of
// a DeltaNet layer and of a gated-attention layer, and a Llama draft model of the target's vocab.
// Each keeps KV of its own (its pool empties too); neither has a recurrent state.
TEST_P(HybridSpec, Eagle3AndDraftModelDraftsGiveThePlainTokens) {
  const auto& [target, k] = GetParam();
  if (target != "qwen3-next-f32") GTEST_SKIP() << "the EAGLE-3 and draft-model fixtures are qwen3-next-f32's";
  auto plain = make_engine(target, std::nullopt);
  const auto jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/true);
  const auto expected = run(*plain, jobs);
  for (const std::string method : {"eagle3", "draft_model"}) {
    const std::string dir =
        fixture_path(std::string("spec/") + (method == "eagle3" ? "eagle3" : "draft") + "-qwen3-next-f32");
    auto engine = make_engine(target, spec_config(R"({"method": ")" + method + R"(", "model": ")" + dir + "\"", k));
    expect_plain_tokens(*engine, jobs, expected, method + " k=" + std::to_string(k));
  }
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HybridSpec,
                         ::testing::Combine(::testing::Values("qwen3-next-f32", "qwen3-next-bf16", "nemotron-h-f32",
                                                              "qwen35-f32", testing::kBundledHybrid),
                                            ::testing::Values(1, 3, 5)),
                         [](const auto& p) {
                           return testing::test_name_for(std::get<0>(p.param)) + "_k" +
                                  std::to_string(std::get<1>(p.param));
                         });

// Few blocks and a small token budget: requests are preempted (their state group freed, their
// state recomputed from position 0) and prompts are prefilled in chunks longer and shorter than
// the slots; the tokens are still plain decoding's.
TEST(HybridEngine, PreemptionAndChunkingKeepGreedyOutputIdentical) {
  auto plain = make_engine("qwen3-next-f32", std::nullopt);
  const auto jobs = jobs_for(plain->model_config().vocab_size, false);
  const auto expected = run(*plain, jobs);
  EngineConfig c;
  c.model_dir = fixture_path("qwen3-next-f32");
  c.backend.num_threads = 2;
  c.scheduler.max_num_batched_tokens = 7;
  c.scheduler.max_num_seqs = 4;
  const std::int64_t state_bytes = recurrent_state_layout(plain->model_config(), 4).bytes_per_group() * 4;
  c.kv_cache_bytes = state_bytes + 6 * plain->block_pool().block_size() * 2LL * 2 * 16 * 2 * 4;  // 6 blocks
  c.speculative = spec_config(R"({"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3)", 3);
  auto tight = Engine::create(c);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_EQ((*tight)->block_pool().num_blocks(), 6);
  EXPECT_EQ(run(**tight, jobs), expected);
  EXPECT_GT((*tight)->stats().preemptions, 0);
  expect_pools_empty(**tight, "tight");
}

TEST(HybridEngine, StateMemoryComesOutOfTheKvBudgetAndPrefixCachingIsOff) {
  auto e = make_engine("qwen3-next-f32", std::nullopt);
  EXPECT_EQ(e->state_groups()->num_groups(), 16);  // one per running request (max_num_seqs)
  // The same prompt twice: no prefix hit, since cached blocks hold no recurrent state.
  Job a;
  a.id = "a";
  a.prompt.assign(40, 7);
  a.params.max_tokens = 2;
  Job b = a;
  b.id = "b";
  run(*e, {a});
  run(*e, {b});
  EXPECT_EQ(e->stats().prefix_cache_hits, 0);

  EngineConfig c;
  c.model_dir = fixture_path("qwen3-next-f32");
  c.kv_cache_bytes = 1000;  // not even the state of the running requests
  auto refused = Engine::create(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("recurrent state of 64 requests"), std::string::npos)
      << refused.status();
}

// A draft model cannot keep a recurrent state yet: a hybrid one is refused at start, naming it,
// rather than failing every request.
TEST(HybridEngine, AHybridDraftModelIsRefusedAtStart) {
  EngineConfig c;
  c.model_dir = fixture_path("qwen3-next-f32");
  c.kv_cache_bytes = 8 << 20;
  c.scheduler.max_num_seqs = 4;
  c.speculative = spec_config(R"({"method": "draft_model", "model": ")" + fixture_path("qwen3-next-f32") + "\"", 2);
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("a draft model cannot keep their recurrent state yet"),
            std::string::npos)
      << e.status();
}

}  // namespace
}  // namespace baton
