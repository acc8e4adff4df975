// The Engine end to end on fixture models: greedy output equals the reference; batching,
// chunked prefill, preemption by recompute and prefix caching never change a request's tokens;
// seeded sampling does not depend on the batch; aborts and finishes return every block; bad
// requests are refused without disturbing the others.
#include "engine/engine.h"

#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/model_harness.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::Job;

std::map<std::string, std::vector<std::int32_t>> run(Engine& engine, const std::vector<Job>& jobs) {
  return testing::run_jobs(engine, jobs);
}
using testing::load_reference;
using ::testing::HasSubstr;

EngineConfig config_for(const std::string& fixture) {
  EngineConfig c;
  c.model_dir = fixture_path(fixture);
  c.backend.num_threads = 2;
  c.kv_cache_bytes = 8 << 20;
  c.scheduler.max_num_batched_tokens = 256;
  c.scheduler.max_num_seqs = 16;
  return c;
}

std::unique_ptr<Engine> make_engine(const EngineConfig& c) {
  auto e = Engine::create(c);
  BATON_CHECK(e.ok(), e.status().ToString());
  return std::move(*e);
}

std::vector<Job> random_jobs(int n, std::int32_t vocab, std::uint32_t seed, bool sampled) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = "r" + std::to_string(i);
    j.prompt.resize(3 + rng() % 40);
    for (auto& t : j.prompt) t = static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3));
    j.params.max_tokens = 4 + static_cast<std::int32_t>(rng() % 12);
    j.params.temperature = sampled ? 0.8f : 0.0f;
    if (sampled) {
      j.params.top_p = 0.9f;
      j.params.seed = 1000 + static_cast<std::uint64_t>(i);
    }
    j.params.ignore_eos = true;
    jobs.push_back(j);
  }
  return jobs;
}

class EngineFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineFixtureTest, GreedyOutputEqualsReference) {
  const auto ref = load_reference(GetParam());
  auto engine = make_engine(config_for(GetParam()));
  Job j{"a", ref.prompt, {}};
  j.params.temperature = 0;
  j.params.max_tokens = ref.max_new_tokens;
  EXPECT_EQ(run(*engine, {j})["a"], ref.greedy);
}

TEST_P(EngineFixtureTest, BatchedRequestsEqualEachRunAlone) {
  auto engine = make_engine(config_for(GetParam()));
  const auto jobs = random_jobs(8, engine->model_config().vocab_size, 3, /*sampled=*/false);
  const auto batched = run(*engine, jobs);
  for (const Job& j : jobs) {
    auto alone = make_engine(config_for(GetParam()));
    EXPECT_EQ(run(*alone, {j})[j.id], batched.at(j.id)) << j.id;
  }
}

// A BF16 KV cache keeps batch invariance: every request gives alone what it gives in a batch
// (greedy and seeded sampled), on every architecture (sliding windows, GQA, head dims).
TEST_P(EngineFixtureTest, Bf16KvCacheBatchedRequestsEqualEachRunAlone) {
  EngineConfig c = config_for(GetParam());
  c.kv_cache_dtype = DType::kBF16;
  auto engine = make_engine(c);
  auto jobs = random_jobs(6, engine->model_config().vocab_size, 4, /*sampled=*/false);
  for (const Job& j : random_jobs(2, engine->model_config().vocab_size, 5, /*sampled=*/true)) {
    jobs.push_back(j);
    jobs.back().id = "s" + j.id;
  }
  const auto batched = run(*engine, jobs);
  for (const Job& j : jobs) {
    auto alone = make_engine(c);
    EXPECT_EQ(run(*alone, {j})[j.id], batched.at(j.id)) << j.id;
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, EngineFixtureTest, ::testing::ValuesIn(testing::fixture_names()),
                         [](const auto& p) { return testing::test_name_for(p.param); });

// A hybrid model's hand-off moves its recurrent state from the engines' own state memory; through
// host mirrors (a GPU whose memory the host cannot read) it cannot yet, so such a P/D engine is
// refused at start with the reason, never served wrongly.
TEST(Engine, HybridModelsRefuseAHandoffThroughHostMirrors) {
  for (const NodeRole role : {NodeRole::kPrefill, NodeRole::kDecode}) {
    EngineConfig c = config_for("qwen3-next-f32");
    c.role = role;
    c.backend.cpu_discrete_memory = true;
    auto engine = Engine::create(c);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(engine.status().message()),
                ::testing::HasSubstr("recurrent state a hand-off cannot move through host mirrors yet"));
  }
}

TEST(Engine, SeededSamplingDoesNotDependOnTheBatch) {
  auto engine = make_engine(config_for("qwen3-bf16"));
  auto jobs = random_jobs(6, engine->model_config().vocab_size, 5, /*sampled=*/true);
  jobs[5].params.seed.reset();  // an unseeded neighbour
  const auto batched = run(*engine, jobs);
  for (int i = 0; i < 5; ++i) {
    auto alone = make_engine(config_for("qwen3-bf16"));
    EXPECT_EQ(run(*alone, {jobs[static_cast<std::size_t>(i)]})[jobs[static_cast<std::size_t>(i)].id],
              batched.at(jobs[static_cast<std::size_t>(i)].id));
  }
  // Different seeds give different streams (with overwhelming probability over 5 requests).
  std::set<std::vector<std::int32_t>> distinct;
  for (int i = 0; i < 5; ++i) distinct.insert(batched.at(jobs[static_cast<std::size_t>(i)].id));
  EXPECT_GT(distinct.size(), 1u);
}

TEST(Engine, UnseededRequestsDrawSeedsNobodyCanPredict) {
  // Two engines (two processes, or one restarted) give an unseeded request different seeds: the
  // seeds come from the operating system's entropy, not a generator that starts at 0.
  // Four requests sampled from the whole distribution (temperature 1, no top-p): the random
  // fixture is peaked enough that one request cut to its top 90 % often repeats itself exactly,
  // whatever its seed; four full-distribution ones all coinciding is negligible.
  auto jobs = random_jobs(4, make_engine(config_for("qwen3-bf16"))->model_config().vocab_size, 9, /*sampled=*/true);
  for (Job& j : jobs) {
    j.params.seed.reset();
    j.params.max_tokens = 24;
    j.params.temperature = 1.0f;
    j.params.top_p = 1.0f;
  }
  auto first = make_engine(config_for("qwen3-bf16"));
  auto second = make_engine(config_for("qwen3-bf16"));
  EXPECT_NE(run(*first, jobs), run(*second, jobs));
  // An engine seed given on purpose still makes them reproducible.
  EngineConfig fixed = config_for("qwen3-bf16");
  fixed.seed = 7;
  auto a = make_engine(fixed);
  auto b = make_engine(fixed);
  EXPECT_EQ(run(*a, jobs), run(*b, jobs));
}

// The draw that decides token p is uniform 0 of token_stream(seed, p) applied to the row's
// processed distribution (random.h), whether the token comes from a decode step or from a
// verification of one-hot drafts: replayed here by the host Sampler on the logits of one prefill
// forward over the request's final tokens (batch-invariant kernels make them the same rows).
TEST(Engine, SeededSamplingDrawsTheDocumentedStreamAtEachPosition) {
  const std::string fixture = "llama-f32";
  Job job;
  job.id = "s";
  job.prompt = {5, 9, 14, 5, 9, 14, 5, 9, 14, 5, 9};  // repeats, so n-gram drafts often
  job.params.temperature = 0.7f;
  job.params.top_k = 40;
  job.params.top_p = 0.95f;
  job.params.min_p = 0.01f;
  job.params.seed = 4242;
  job.params.max_tokens = 24;
  job.params.ignore_eos = true;
  EngineConfig plain = config_for(fixture);
  EngineConfig spec = plain;
  auto ngram = SpeculativeConfig::parse(
      R"({"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3, "num_speculative_tokens": 3})",
      NodeRole::kColocated);
  ASSERT_TRUE(ngram.ok()) << ngram.status();
  spec.speculative = *ngram;
  auto harness = testing::ModelHarness::load(fixture_path(fixture));
  Sampler sampler;
  for (const EngineConfig& c : {plain, spec}) {
    auto engine = make_engine(c);
    const std::vector<std::int32_t> out = run(*engine, {job}).at(job.id);
    ASSERT_EQ(out.size(), 24u);
    testing::TestSequence seq;
    seq.tokens = job.prompt;
    seq.tokens.insert(seq.tokens.end(), out.begin(), out.end() - 1);
    ForwardBatch batch;
    batch.sequences.push_back(seq.chunk(*harness.pool, static_cast<std::int32_t>(seq.tokens.size())));
    const auto rows = harness.forward(batch);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::size_t position = job.prompt.size() + i;  // of the token decided
      RandomStream rng = token_stream(*job.params.seed, static_cast<std::int64_t>(position));
      const std::span<const std::int32_t> so_far(out.data(), i);
      const SampleResult want = sampler.sample(rows[position - 1], job.params, TokenHistory{job.prompt, so_far},
                                               engine->model_config().eos_token_ids, rng);
      ASSERT_EQ(out[i], want.token) << (c.speculative ? "ngram" : "plain") << ", output token " << i;
    }
    if (c.speculative) {
      EXPECT_GT(engine->spec_stats()->num_accepted_tokens, 0) << "no draft was ever accepted";
    }
    seq.table.release_all(*harness.pool);
  }
}

TEST(Engine, ChunkedPrefillGivesTheSameTokens) {
  auto big = make_engine(config_for("llama3-bf16"));
  const auto jobs = random_jobs(4, big->model_config().vocab_size, 7, false);
  const auto expected = run(*big, jobs);
  auto c = config_for("llama3-bf16");
  c.scheduler.max_num_batched_tokens = 5;
  c.scheduler.max_num_seqs = 4;
  auto small = make_engine(c);
  EXPECT_EQ(run(*small, jobs), expected);
}

TEST(Engine, PreemptionByRecomputeGivesTheSameTokens) {
  auto roomy = make_engine(config_for("llama-f32"));
  const auto jobs = random_jobs(8, roomy->model_config().vocab_size, 9, false);
  const auto expected = run(*roomy, jobs);
  auto c = config_for("llama-f32");
  // Room for about 4 blocks per running request, so 8 requests must take turns.
  const std::int64_t block_bytes = 2LL * 2 * 16 * 2 * 18 * 4;  // layers x (K,V) x block x kv_heads x head_dim x f32
  c.kv_cache_bytes = 8 * block_bytes;
  auto tight = make_engine(c);
  const auto got = run(*tight, jobs);
  EXPECT_EQ(got, expected);
  EXPECT_GT(tight->stats().preemptions, 0);
  EXPECT_EQ(tight->block_pool().num_in_use(), 0);
}

// kv_cache_tokens sizes the pool by tokens (rounded up to blocks, never past kv_cache_bytes), and
// max_model_len follows it; a request that fits runs to the same tokens as in a roomy cache.
TEST(Engine, KvCacheTokensSizeThePoolForTheRequestsAtHand) {
  auto roomy = make_engine(config_for("llama-f32"));
  std::vector<Job> jobs = random_jobs(1, roomy->model_config().vocab_size, 5, false);
  const std::int64_t need = static_cast<std::int64_t>(jobs[0].prompt.size()) + jobs[0].params.max_tokens;
  auto c = config_for("llama-f32");
  c.kv_cache_tokens = need;
  auto fitted = make_engine(c);
  const std::int32_t blocks = static_cast<std::int32_t>((need + 15) / 16);
  EXPECT_EQ(fitted->block_pool().num_blocks(), blocks);
  EXPECT_EQ(fitted->max_model_len(), blocks * 16);
  EXPECT_EQ(run(*fitted, jobs), run(*roomy, jobs));
  // More tokens than the byte budget holds: the budget wins.
  c.kv_cache_tokens = std::int64_t{1} << 40;
  EXPECT_EQ(make_engine(c)->block_pool().num_blocks(), roomy->block_pool().num_blocks());
}

TEST(Engine, PrefixCacheServesARepeatedPromptWithTheSameTokens) {
  auto engine = make_engine(config_for("mistral-f16"));
  Job j = random_jobs(1, engine->model_config().vocab_size, 11, false)[0];
  j.prompt.resize(40, 5);
  const auto first = run(*engine, {j});
  ASSERT_TRUE(engine->add_request("again", j.prompt, j.params).ok());
  std::vector<std::int32_t> second;
  std::int32_t cached = 0;
  while (engine->has_unfinished()) {
    const auto outs = engine->step();  // keep the StatusOr alive across the loop
    for (const auto& o : *outs) {
      for (const auto& t : o.new_tokens) second.push_back(t.token);
      cached = o.num_cached_prompt_tokens;
    }
  }
  EXPECT_EQ(second, first.at(j.id));
  EXPECT_EQ(cached, 32);  // two full blocks of 16; the last token is always recomputed
}

TEST(Engine, AbortAndFinishReturnEveryBlock) {
  auto engine = make_engine(config_for("qwen2-f32"));
  auto jobs = random_jobs(5, engine->model_config().vocab_size, 13, false);
  for (const Job& j : jobs) ASSERT_TRUE(engine->add_request(j.id, j.prompt, j.params).ok());
  ASSERT_TRUE(engine->step().ok());
  ASSERT_TRUE(engine->step().ok());
  EXPECT_GT(engine->block_pool().num_in_use(), 0);
  engine->abort("r1");
  engine->abort("r3");
  engine->abort("no-such-request");
  while (engine->has_unfinished()) ASSERT_TRUE(engine->step().ok());
  EXPECT_EQ(engine->block_pool().num_in_use(), 0);
}

TEST(Engine, StopsAtEosFromGenerationConfig) {
  const auto ref = load_reference("llama3-bf16");  // its greedy continuation ends with EOS id 144
  auto engine = make_engine(config_for("llama3-bf16"));
  Job j{"a", ref.prompt, {}};
  j.params.temperature = 0;
  j.params.max_tokens = 50;
  ASSERT_TRUE(engine->add_request(j.id, j.prompt, j.params).ok());
  RequestOutput last;
  while (engine->has_unfinished()) {
    const auto outs = engine->step();
    for (const auto& o : *outs) last = o;
  }
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, FinishReason::kStop);
  ASSERT_TRUE(last.stop_token.has_value());
  EXPECT_EQ(*last.stop_token, ref.greedy.back());
  EXPECT_EQ(last.num_output_tokens, static_cast<std::int32_t>(ref.greedy.size()));
}

TEST(Engine, RefusesAKvCacheDtypeItsBackendCannotStore) {
  EngineConfig c = config_for("llama-f32");
  c.kv_cache_dtype = DType::kF16;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("kv cache dtype F16"));
  EXPECT_THAT(e.status().message(), HasSubstr("cpu"));
}

TEST(Engine, RefusesBadRequestsAndKeepsServing) {
  auto engine = make_engine(config_for("llama-f32"));
  SamplingParams ok;
  ok.temperature = 0;
  ok.max_tokens = 4;
  EXPECT_THAT(engine->add_request("a", {}, ok).message(), HasSubstr("empty"));
  EXPECT_THAT(engine->add_request("b", {1, 100000}, ok).message(), HasSubstr("outside the vocabulary"));
  SamplingParams bad = ok;
  bad.top_p = 1.5f;
  EXPECT_THAT(engine->add_request("c", {1, 2}, bad).message(), HasSubstr("top_p"));
  SamplingParams long_req = ok;
  long_req.max_tokens = 10000;
  EXPECT_THAT(engine->add_request("d", {1, 2}, long_req).message(), HasSubstr("max_model_len"));
  SamplingParams stop = ok;
  stop.stop = {"x"};
  EXPECT_THAT(engine->add_request("e", {1, 2}, stop).message(), HasSubstr("tokenizer"));
  ASSERT_TRUE(engine->add_request("f", {5, 6, 7}, ok).ok());
  EXPECT_EQ(engine->add_request("f", {5}, ok).code(), absl::StatusCode::kAlreadyExists);
  const auto out = run(*engine, {});
  EXPECT_EQ(out.at("f").size(), 4u);
}

}  // namespace
}  // namespace baton
