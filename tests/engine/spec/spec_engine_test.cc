// Lossless speculative decoding end to end in the Engine: for every method and k in {1, 3, 5},
// greedy output is token-for-token the output of plain greedy decoding, over many prompts in one
// batch that mixes speculating requests, requests without drafts, and sampled requests; seeded
// sampled output does not depend on the batch; acceptance counters are consistent; rejected KV is
// rolled back (all blocks return to the pool); the opt-in BF16-dot CPU tier and a BF16 KV cache
// keep greedy output identical too, and so does a response_format's token mask.
#include <map>
#include <random>
#include <set>

#include "engine/engine.h"
#include "gmock/gmock.h"
#include "kernels/cpu/cpu_features.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/spec/spec_engine_support.h"
#include "tests/engine/spec_methods.h"
#include "tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using testing::fixture_path;
using testing::Job;
using testing::jobs_for;
using testing::make_engine;
using testing::method_cases;
using testing::MethodCase;
using testing::run;

class SpecEquivalence : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SpecEquivalence, GreedyOutputIsIdenticalToNonSpeculativeDecoding) {
  const MethodCase m = method_cases()[static_cast<std::size_t>(std::get<0>(GetParam()))];
  const int k = std::get<1>(GetParam());
  auto plain = make_engine(m.target, std::nullopt);
  const auto jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/true);
  const auto expected = run(*plain, jobs);

  auto spec = SpeculativeConfig::parse(m.json + ", \"num_speculative_tokens\": " + std::to_string(k) + "}",
                                       NodeRole::kColocated);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto engine = make_engine(m.target, *spec);
  const auto got = run(*engine, jobs);
  for (const Job& j : jobs) {
    if (!j.params.greedy()) continue;
    EXPECT_EQ(got.at(j.id), expected.at(j.id)) << m.label << " k=" << k << " request " << j.id;
  }
  const SpecDecodeStats& st = *engine->spec_stats();
  EXPECT_GT(st.num_draft_tokens, 0) << m.label << ": never speculated";
  EXPECT_LE(st.num_accepted_tokens, st.num_draft_tokens);
  EXPECT_LE(st.num_draft_tokens, st.num_drafts * k);
  std::int64_t per_position = 0;
  for (std::size_t i = 0; i < st.accepted_per_position.size(); ++i) {
    per_position += st.accepted_per_position[i];
    if (i > 0) {
      EXPECT_LE(st.accepted_per_position[i], st.accepted_per_position[i - 1]);
    }
  }
  EXPECT_EQ(per_position, st.num_accepted_tokens);
  EXPECT_EQ(engine->block_pool().num_in_use(), 0) << "blocks leaked";
  if (m.label.starts_with("self_draft") && k > 1) {
    EXPECT_GT(st.mean_acceptance_length(), 1.5) << "a model drafting for itself should be accepted";
  }
  RecordProperty("mean_acceptance_length", std::to_string(st.mean_acceptance_length()));
}

INSTANTIATE_TEST_SUITE_P(AllMethods, SpecEquivalence,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(method_cases().size())),
                                            ::testing::Values(1, 3, 5)),
                         [](const auto& p) {
                           return method_cases()[static_cast<std::size_t>(std::get<0>(p.param))].label + "_k" +
                                  std::to_string(std::get<1>(p.param));
                         });

// The paths a GPU takes (logits rows, picked ids and kept hidden-state rows copied to the host,
// weights copied in) on a CPU backend that refuses in-place reads: every method gives exactly
// the tokens (greedy, seeded sampled and penalised alike), drafts and acceptances of the same
// engine reading in place.
TEST(SpecEngine, DiscreteMemoryPathsGiveTheSameTokensAndDrafts) {
  for (const MethodCase& m : method_cases()) {
    auto spec = SpeculativeConfig::parse(m.json + ", \"num_speculative_tokens\": 3}", NodeRole::kColocated);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto in_place = make_engine(m.target, *spec);
    auto discrete = make_engine(m.target, *spec, "auto", /*discrete_memory=*/true);
    ASSERT_FALSE(discrete->backend().host_reads_device_memory());
    const auto jobs = jobs_for(in_place->model_config().vocab_size, /*include_sampled=*/true);
    EXPECT_EQ(run(*discrete, jobs), run(*in_place, jobs)) << m.label;
    EXPECT_EQ(discrete->spec_stats()->num_draft_tokens, in_place->spec_stats()->num_draft_tokens) << m.label;
    EXPECT_EQ(discrete->spec_stats()->num_accepted_tokens, in_place->spec_stats()->num_accepted_tokens) << m.label;
  }
}

// Decode and verification steps replayed from captured graphs, as on a GPU (on the CPU a graph
// is the ops recorded and run again; engine/model/forward_graphs.h): without speculation and with
// every method, the tokens (greedy, seeded sampled and penalised), drafts and acceptances are
// exactly the engine's running every forward op by op, and the graphs were replayed. The engine
// captures a decode graph per batch bucket (1, 2, 4, 8, 16 for 16 sequences) when it starts, and a
// verification graph per bucket too when it speculates.
TEST(SpecEngine, GraphReplaysGiveTheSameTokensAndDrafts) {
  {
    auto eager = make_engine("llama-f32", std::nullopt, "auto", false, GraphMode::kOff);
    auto graphed = make_engine("llama-f32", std::nullopt, "auto", false, GraphMode::kOn);
    EXPECT_EQ(graphed->graph_stats().captured, 5);
    EXPECT_EQ(eager->graph_stats().captured, 0);
    const auto jobs = jobs_for(eager->model_config().vocab_size, /*include_sampled=*/true);
    EXPECT_EQ(run(*graphed, jobs), run(*eager, jobs)) << "no speculation";
    EXPECT_GT(graphed->graph_stats().replays, 0);
    EXPECT_EQ(eager->graph_stats().replays, 0);
  }
  for (const MethodCase& m : method_cases()) {
    auto spec = SpeculativeConfig::parse(m.json + ", \"num_speculative_tokens\": 3}", NodeRole::kColocated);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto eager = make_engine(m.target, *spec, "auto", false, GraphMode::kOff);
    auto graphed = make_engine(m.target, *spec, "auto", false, GraphMode::kOn);
    EXPECT_EQ(graphed->graph_stats().captured, 10) << m.label;
    const auto jobs = jobs_for(eager->model_config().vocab_size, /*include_sampled=*/true);
    EXPECT_EQ(run(*graphed, jobs), run(*eager, jobs)) << m.label;
    EXPECT_EQ(graphed->spec_stats()->num_draft_tokens, eager->spec_stats()->num_draft_tokens) << m.label;
    EXPECT_EQ(graphed->spec_stats()->num_accepted_tokens, eager->spec_stats()->num_accepted_tokens) << m.label;
    EXPECT_GT(graphed->graph_stats().replays, 0) << m.label;
    EXPECT_EQ(eager->graph_stats().replays, 0) << m.label;
  }
}

// An n-gram proposer drafts for one request and not (or less) for another in the same step: such a
// step pads the shorter sequences with fillers and replays a graph, so the only target forwards run
// op by op are the prefill and each graph's first run (its capture).
TEST(SpecEngine, StepsMixingDraftLengthsReplayGraphs) {
  const MethodCase m = method_cases()[0];
  ASSERT_EQ(m.label, "ngram");
  auto spec = SpeculativeConfig::parse(m.json + ", \"num_speculative_tokens\": 3}", NodeRole::kColocated);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto eager = make_engine(m.target, *spec, "auto", false, GraphMode::kOff);
  auto graphed = make_engine(m.target, *spec, "auto", false, GraphMode::kOn);
  const auto all = jobs_for(eager->model_config().vocab_size, /*include_sampled=*/false);
  const std::vector<Job> jobs = {all[0], all[1]};  // a prompt without repeats, one with
  EXPECT_EQ(run(*graphed, jobs), run(*eager, jobs));
  EXPECT_GT(graphed->spec_stats()->num_draft_tokens, 0);
  const GraphStats& g = graphed->graph_stats();
  EXPECT_EQ(g.eager - g.captured, 1) << "target forwards without a graph besides the prefill (" << g.replays
                                     << " replays)";
}

TEST(SpecEngine, SeededSampledOutputDoesNotDependOnTheBatch) {
  auto spec = SpeculativeConfig::parse(R"({"method": "draft_model", "num_speculative_tokens": 3, "model": ")" +
                                           fixture_path("spec/draft-llama-f32") + "\"}",
                                       NodeRole::kColocated);
  ASSERT_TRUE(spec.ok());
  auto batched = make_engine("llama-f32", *spec);
  const auto jobs = jobs_for(batched->model_config().vocab_size, true);
  const auto all = run(*batched, jobs);
  for (const Job& j : jobs) {
    if (j.params.greedy()) continue;
    auto alone = make_engine("llama-f32", *spec);
    EXPECT_EQ(run(*alone, {j}).at(j.id), all.at(j.id)) << j.id;
  }
}

// Entropy verification (lossy) leaves greedy requests exactly as plain decoding, marks every
// sampled request that verified drafts lossy, and no greedy one; without it nothing is lossy.
TEST(SpecEngine, EntropyVerificationKeepsGreedyOutputAndMarksSampledRequestsLossy) {
  for (const bool entropy : {false, true}) {
    const std::string rs = entropy ? R"(, "rejection_sampler_config": {"enable_entropy_verify": true, "posterior_alpha": 1})"
                                   : "";
    auto spec = SpeculativeConfig::parse(R"({"method": "draft_model", "num_speculative_tokens": 3, "model": ")" +
                                             fixture_path("spec/draft-llama-f32") + "\"" + rs + "}",
                                         NodeRole::kColocated);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto plain = make_engine("llama-f32", std::nullopt);
    auto engine = make_engine("llama-f32", *spec);
    const auto jobs = jobs_for(engine->model_config().vocab_size, /*include_sampled=*/true);
    const auto want = run(*plain, jobs);
    for (const Job& j : jobs) ASSERT_TRUE(engine->add_request(j.id, j.prompt, j.params).ok());
    std::map<std::string, std::vector<std::int32_t>> got;
    std::map<std::string, RequestSpecCounts> spec_of;
    while (engine->has_unfinished()) {
      auto outs = engine->step();
      ASSERT_TRUE(outs.ok()) << outs.status();
      for (const auto& o : *outs) {
        for (const auto& t : o.new_tokens) got[o.request_id].push_back(t.token);
        if (o.finished) spec_of[o.request_id] = o.spec;
      }
    }
    for (const Job& j : jobs) {
      const RequestSpecCounts& c = spec_of.at(j.id);
      if (j.params.greedy()) {
        EXPECT_EQ(got.at(j.id), want.at(j.id)) << j.id;
        EXPECT_FALSE(c.lossy) << j.id;
      } else {
        EXPECT_GT(c.num_draft_tokens, 0) << j.id;
        EXPECT_EQ(c.lossy, entropy) << j.id;
      }
    }
  }
}

// A request's max_speculative_tokens = 0 makes every one of its steps a plain decode step, even in a
// batch of speculating requests: its tokens are exactly the plain engine's (greedy and seeded
// sampled alike, since batch-invariant kernels make its rows independent of the batch), and it
// verifies no drafts. A cap of 1 limits the drafts per step without changing greedy output.
TEST(SpecEngine, RequestsWithSpeculationOffDecodePlainlyAmongSpeculatingOnes) {
  // The target drafting for itself with probabilistic drafts: speculating requests accept almost
  // everything and read their randomness differently from plain decoding.
  auto spec = SpeculativeConfig::parse(R"({"method": "draft_model", "num_speculative_tokens": 4, )"
                                       R"("draft_sample_method": "probabilistic", "model": ")" +
                                           fixture_path("llama-f32") + "\"}",
                                       NodeRole::kColocated);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plain = make_engine("llama-f32", std::nullopt);
  auto engine = make_engine("llama-f32", *spec);
  std::vector<Job> jobs = jobs_for(engine->model_config().vocab_size, /*include_sampled=*/true);
  const std::size_t n = jobs.size();
  for (std::size_t i = 0; i < n; ++i) {  // the same prompts again, with speculation off or capped
    Job j = jobs[i];
    j.id += i % 3 == 2 ? "-cap1" : "-off";
    j.params.max_speculative_tokens = i % 3 == 2 ? 1 : 0;
    jobs.push_back(j);
  }
  const auto expected = run(*plain, jobs);
  std::map<std::string, std::vector<std::int32_t>> got;
  std::map<std::string, RequestSpecCounts> counts;
  for (const Job& j : jobs) ASSERT_TRUE(engine->add_request(j.id, j.prompt, j.params).ok());
  while (engine->has_unfinished()) {
    auto outs = engine->step();
    ASSERT_TRUE(outs.ok()) << outs.status();
    for (const RequestOutput& o : *outs) {
      for (const TokenOutput& t : o.new_tokens) got[o.request_id].push_back(t.token);
      counts[o.request_id] = o.spec;
    }
  }
  for (const Job& j : jobs) {
    const RequestSpecCounts& c = counts.at(j.id);
    if (j.params.max_speculative_tokens == 0) {
      EXPECT_EQ(got.at(j.id), expected.at(j.id)) << j.id << " must decode exactly as without speculation";
      EXPECT_EQ(c.num_draft_tokens, 0) << j.id;
    } else if (j.params.max_speculative_tokens == 1) {
      EXPECT_LE(c.num_draft_tokens, c.num_drafts) << j.id << ": at most one draft per step";
    }
    if (j.params.greedy()) {
      EXPECT_EQ(got.at(j.id), expected.at(j.id)) << j.id;
    }
  }
  EXPECT_GT(engine->spec_stats()->num_accepted_tokens, 0) << "the speculating requests never speculated";
  EXPECT_EQ(engine->block_pool().num_in_use(), 0) << "blocks leaked";
}

// disable_by_batch_size: no step that decodes at least that many requests verifies a draft. Once
// requests finish and fewer remain, drafting resumes (the proposer kept up with every request
// meanwhile), and every request's greedy tokens are the plain engine's throughout.
TEST(SpecEngine, DisableByBatchSizeDraftsOnlyForSmallerBatches) {
  // The target drafting for itself: every step that may draft does, and nearly all is accepted.
  auto spec = SpeculativeConfig::parse(R"({"method": "draft_model", "num_speculative_tokens": 3, )"
                                       R"("disable_by_batch_size": 3, "model": ")" +
                                           fixture_path("llama-f32") + "\"}",
                                       NodeRole::kColocated);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plain = make_engine("llama-f32", std::nullopt);
  auto engine = make_engine("llama-f32", *spec);
  std::vector<Job> jobs = jobs_for(engine->model_config().vocab_size, /*include_sampled=*/false);
  jobs.resize(4);
  for (std::size_t i = 0; i < jobs.size(); ++i) {  // they finish one by one
    jobs[i].params.max_tokens = 6 + 10 * static_cast<std::int32_t>(i);
    jobs[i].params.ignore_eos = true;
  }
  const auto expected = run(*plain, jobs);
  for (const Job& j : jobs) ASSERT_TRUE(engine->add_request(j.id, j.prompt, j.params).ok());
  std::map<std::string, std::vector<std::int32_t>> got;
  std::map<std::string, std::int64_t> drafted;  // draft tokens verified so far, per request
  std::set<std::string> finished;
  std::int64_t drafted_in_small_batches = 0;
  while (engine->has_unfinished()) {
    const std::size_t unfinished = jobs.size() - finished.size();
    auto outs = engine->step();
    ASSERT_TRUE(outs.ok()) << outs.status();
    std::int64_t step_drafts = 0;
    for (const RequestOutput& o : *outs) {
      for (const TokenOutput& t : o.new_tokens) got[o.request_id].push_back(t.token);
      step_drafts += o.spec.num_draft_tokens - drafted[o.request_id];
      drafted[o.request_id] = o.spec.num_draft_tokens;
      if (o.finished) finished.insert(o.request_id);
    }
    if (unfinished >= 3) {
      EXPECT_EQ(step_drafts, 0) << "a step decoding " << unfinished << " requests verified drafts";
    } else {
      drafted_in_small_batches += step_drafts;
    }
  }
  EXPECT_GT(drafted_in_small_batches, 0) << "drafting never resumed once fewer than 3 requests decoded";
  for (const Job& j : jobs) EXPECT_EQ(got.at(j.id), expected.at(j.id)) << j.id;
  EXPECT_EQ(engine->block_pool().num_in_use(), 0) << "blocks leaked";
}

TEST(SpecEngine, NegativeMaxSpeculativeTokensIsRefused) {
  auto engine = make_engine("llama-f32", std::nullopt);
  SamplingParams p;
  p.max_speculative_tokens = -1;
  const absl::Status s = engine->add_request("bad", {1, 2, 3}, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("max_speculative_tokens"));
}

// response_format: every method's greedy output under a JSON schema is plain greedy decoding's
// under it (the verification rows are masked as the sampled ones), and a request that ended on its
// own is JSON the schema accepts; a seeded sampled request too. A schema the grammar cannot
// enforce, and an engine without the tokenizer's bytes, are refused at add_request.
TEST(SpecEngine, ResponseFormatConstrainsEveryMethodLosslessly) {
  const std::string format =
      R"({"type":"json_schema","json_schema":{"name":"t","schema":{"type":"object","properties":)"
      R"({"ok":{"type":"boolean"},"kind":{"enum":["a","bc",null]}},"required":["ok","kind"],"additionalProperties":false}}})";
  auto tokenizer = Tokenizer::load(fixture_path("llama-f32"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<std::string> bytes = (*tokenizer)->token_bytes();
  std::vector<Job> jobs;
  for (int i = 0; i < 5; ++i) {
    Job j;
    j.id = "j" + std::to_string(i);
    for (int t = 0; t < 6 + i; ++t) j.prompt.push_back(3 + (t * 37 + i * 11) % 300);
    j.params.temperature = i == 4 ? 0.9f : 0.0f;
    if (i == 4) j.params.seed = 5;
    j.params.max_tokens = 160;
    j.params.response_format = format;
    jobs.push_back(j);
  }
  const auto check_json = [&](const std::map<std::string, std::vector<std::int32_t>>& out, const std::string& label) {
    int complete = 0;
    for (const auto& [id, tokens] : out) {
      std::string text;
      for (std::int32_t t : tokens) text += bytes[static_cast<std::size_t>(t)];
      const auto parsed = nlohmann::json::parse(text, nullptr, false);
      if (parsed.is_discarded()) continue;  // cut off by max_tokens
      ++complete;
      EXPECT_TRUE(parsed.is_object() && parsed.size() == 2 && parsed["ok"].is_boolean()) << label << " " << text;
      EXPECT_TRUE(parsed["kind"] == "a" || parsed["kind"] == "bc" || parsed["kind"].is_null()) << label << " " << text;
    }
    return complete;
  };
  auto plain = make_engine("llama-f32", std::nullopt);
  plain->set_token_bytes(bytes);
  const auto expected = run(*plain, jobs);
  EXPECT_GE(check_json(expected, "plain"), 3) << "most requests should end their JSON within max_tokens";
  for (const MethodCase& m : method_cases()) {
    if (m.target != "llama-f32") continue;
    auto engine = make_engine(m.target, m.config(3));
    engine->set_token_bytes(bytes);
    const auto got = run(*engine, jobs);
    for (int i = 0; i < 4; ++i) {
      const std::string id = "j" + std::to_string(i);
      EXPECT_EQ(got.at(id), expected.at(id)) << m.label << " " << id;
    }
    check_json(got, m.label);
    EXPECT_GT(engine->spec_stats()->num_draft_tokens, 0) << m.label;
  }
  // What cannot be honoured is refused when the request is added.
  SamplingParams bad;
  bad.response_format = R"({"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"x"}}})";
  EXPECT_THAT(std::string(plain->add_request("bad", {1, 2}, bad).message()), ::testing::HasSubstr("'pattern'"));
  auto bare = make_engine("llama-f32", std::nullopt);
  SamplingParams json_object;
  json_object.response_format = R"({"type":"json_object"})";
  EXPECT_THAT(std::string(bare->add_request("x", {1, 2}, json_object).message()), ::testing::HasSubstr("tokenizer"));
}

TEST(SpecEngine, MtpWithoutNumSpeculativeTokensDraftsOnePerModule) {
  // Unset k means one draft per MTP layer (it used to stay -1: no drafts at all).
  auto spec = SpeculativeConfig::parse(R"({"method": "mtp", "model": ")" + fixture_path("spec/mtp2-deepseek-llama-f32") + "\"}",
                                       NodeRole::kColocated);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto engine = make_engine("llama-f32", *spec);
  ASSERT_NE(engine->speculative_config(), nullptr);
  EXPECT_EQ(engine->speculative_config()->num_speculative_tokens, 2);
  const auto jobs = jobs_for(engine->model_config().vocab_size, false);
  run(*engine, jobs);
  EXPECT_GT(engine->spec_stats()->num_draft_tokens, 0);
  EXPECT_EQ(engine->spec_stats()->accepted_per_position.size(), 2u);
  EXPECT_LE(engine->spec_stats()->num_draft_tokens, 2 * engine->spec_stats()->num_drafts);

  // A prefill node must run k = 1: the resolved default (2) breaks the P/D rule there.
  auto prefill_spec = SpeculativeConfig::parse(
      R"({"method": "mtp", "model": ")" + fixture_path("spec/mtp2-deepseek-llama-f32") + "\"}", NodeRole::kPrefill);
  ASSERT_TRUE(prefill_spec.ok()) << prefill_spec.status();
  EngineConfig c;
  c.model_dir = fixture_path("llama-f32");
  c.kv_cache_bytes = 8 << 20;
  c.speculative = *prefill_spec;
  c.role = NodeRole::kPrefill;
  auto refused = Engine::create(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("is 2 on a prefill node"));
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("P/D rule requires 1"));
  // With the 1-layer head the default is 1, which a prefill node accepts.
  c.speculative = *SpeculativeConfig::parse(
      R"({"method": "mtp", "model": ")" + fixture_path("spec/mtp-deepseek-llama-f32") + "\"}", NodeRole::kPrefill);
  auto accepted = Engine::create(c);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ((*accepted)->speculative_config()->num_speculative_tokens, 1);
}

TEST(SpecEngine, DecodeRoleRefusesKZeroAndPrefillRoleRefusesKAboveOne) {
  EngineConfig c;
  c.model_dir = fixture_path("llama-f32");
  c.kv_cache_bytes = 8 << 20;
  c.role = NodeRole::kPrefill;
  c.speculative = *SpeculativeConfig::parse(R"({"method": "ngram", "num_speculative_tokens": 3})", NodeRole::kColocated);
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), ::testing::HasSubstr("is 3 on a prefill node"));
}

TEST(SpecEngine, PreemptionAndChunkingKeepGreedyOutputIdentical) {
  auto plain = make_engine("llama-f32", std::nullopt);
  const auto jobs = jobs_for(plain->model_config().vocab_size, false);
  const auto expected = run(*plain, jobs);
  auto spec = SpeculativeConfig::parse(R"({"method": "eagle3", "num_speculative_tokens": 4, "model": ")" +
                                           fixture_path("spec/eagle3-llama-f32") + "\"}",
                                       NodeRole::kColocated);
  ASSERT_TRUE(spec.ok());
  EngineConfig c;
  c.model_dir = fixture_path("llama-f32");
  c.backend.num_threads = 2;
  c.kv_cache_bytes = 6 * 2LL * 2 * 16 * 2 * 18 * 4;   // 6 blocks: requests must take turns
  c.scheduler.max_num_batched_tokens = 7;              // chunked prefill, drafts trimmed to the budget
  c.scheduler.max_num_seqs = 4;
  c.speculative = *spec;
  auto tight = Engine::create(c);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_EQ(run(**tight, jobs), expected);
  EXPECT_GT((*tight)->stats().preemptions, 0);
  EXPECT_EQ((*tight)->block_pool().num_in_use(), 0);
}

// The opt-in BF16-dot tier computes BF16-weight GEMMs its own way (activations rounded to BF16,
// VDPBF16PS over the packed panels): its rows are just as batch-invariant, so a verification of
// k + 1 tokens must still reproduce plain greedy decoding under it, token for token.
// A BF16 KV cache (target and draft pools): twice the blocks in the same bytes, and for every
// method greedy output is plain greedy decoding's over the same BF16 cache, with no block leaked.
TEST(SpecEngine, Bf16KvCacheKeepsEveryMethodLossless) {
  {
    auto f32 = make_engine("llama-f32", std::nullopt);
    auto bf16 = make_engine("llama-f32", std::nullopt, "auto", false, GraphMode::kAuto, DType::kBF16);
    EXPECT_EQ(bf16->block_pool().num_blocks(), 2 * f32->block_pool().num_blocks());
  }
  for (const MethodCase& m : method_cases()) {
    auto plain = make_engine(m.target, std::nullopt, "auto", false, GraphMode::kAuto, DType::kBF16);
    const auto jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/false);
    const auto expected = run(*plain, jobs);
    auto spec = SpeculativeConfig::parse(m.json + ", \"num_speculative_tokens\": 3}", NodeRole::kColocated);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto engine = make_engine(m.target, *spec, "auto", false, GraphMode::kAuto, DType::kBF16);
    EXPECT_EQ(run(*engine, jobs), expected) << m.label;
    EXPECT_GT(engine->spec_stats()->num_draft_tokens, 0) << m.label << ": nothing was verified";
    EXPECT_EQ(engine->block_pool().num_in_use(), 0) << m.label << ": blocks leaked";
  }
}

TEST(SpecEngine, Bf16DotTierKeepsGreedyOutputIdentical) {
  if (!cpu::CpuFeatures::detect().supports(cpu::CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512-BF16";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"llama3-bf16", R"({"method": "draft_model", "num_speculative_tokens": 4, "model": ")" +
                          fixture_path("llama3-bf16") + "\"}"},
      {"llama3-bf16", R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1})"},
      {"qwen3-bf16", R"({"method": "mtp", "num_speculative_tokens": 1, "model": ")" +
                         fixture_path("spec/mtp-qwen3next-qwen3-bf16") + "\"}"},
  };
  for (const auto& [target, json] : cases) {
    auto plain = make_engine(target, std::nullopt, "avx512bf16");
    const auto jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/false);
    const auto expected = run(*plain, jobs);
    auto spec = SpeculativeConfig::parse(json, NodeRole::kColocated);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto engine = make_engine(target, *spec, "avx512bf16");
    EXPECT_EQ(run(*engine, jobs), expected) << json;
    EXPECT_GT(engine->spec_stats()->num_draft_tokens, 0) << json << ": nothing was verified";
    if (json.find("draft_model") != std::string::npos) {  // the target drafting for itself
      EXPECT_GT(engine->spec_stats()->num_accepted_tokens, 0) << json;
    }
  }
}

}  // namespace
}  // namespace baton
