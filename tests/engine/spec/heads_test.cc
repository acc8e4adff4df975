// Model-based proposers on the tiny heads in every public checkpoint layout (tools/fixtures/
// make_spec_fixtures.py): the draft model, EAGLE-1, EAGLE-3 (and its speculators format), MTP in
// DeepSeek-V3 (one and two layers) and Qwen3-Next layouts. Their greedy drafts after a fixed
// sequence must equal the float64 reference (tools/reference/draft_heads_ref.py), which proves the
// tensor names, shapes, fusions and feedback rules; a mismatched vocabulary is refused.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "engine/spec/draft_head.h"
#include "engine/spec/draft_model_proposer.h"
#include "engine/spec/head_proposer.h"
#include "engine/spec/proposer_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/model_harness.h"
#include "tests/engine/spec/head_harness.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::ModelHarness;
using testing::TestSequence;
using namespace testing::heads;

// Interleaves a forward's captured states on the host, [rows, width] (TargetStateSpec order).
std::vector<float> interleave(const TargetStateRows& rows, std::int32_t n) {
  std::vector<float> out;
  if (rows.tensors.empty()) return out;
  const auto h = static_cast<std::size_t>(rows.tensors.front().dim(1));
  const std::size_t w = h * rows.tensors.size();
  out.resize(static_cast<std::size_t>(n) * w);
  for (std::size_t v = 0; v < rows.tensors.size(); ++v) {
    for (std::int32_t t = 0; t < n; ++t) {
      std::memcpy(out.data() + static_cast<std::size_t>(t) * w + v * h,
                  rows.tensors[v].ptr<const float>() + static_cast<std::size_t>(rows.first_row + t) * h, h * sizeof(float));
    }
  }
  return out;
}

SpecMethod method_of(const std::string& m) {
  if (m == "draft_model") return SpecMethod::kDraftModel;
  if (m == "eagle") return SpecMethod::kEagle;
  if (m == "eagle3") return SpecMethod::kEagle3;
  return SpecMethod::kMtp;
}

SpeculativeConfig head_config(const HeadCase& c) {
  SpeculativeConfig sc;
  sc.method = method_of(c.method);
  sc.model = fixture_path("spec/" + c.name);
  sc.num_speculative_tokens = c.k;
  return sc;
}

TEST(DraftHeads, GreedyDraftsEqualTheReferenceInEveryLayout) {
  const auto cases = head_cases();
  ASSERT_EQ(cases.size(), 11u);
  for (const HeadCase& c : cases) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto proposer = make_proposer(head_config(c), context_for(h, c.target));
    ASSERT_TRUE(proposer.ok()) << c.name << ": " << proposer.status();
    // Garbage in every KV slot first: a head that reads a slot it never wrote (e.g. one MTP
    // module attending over positions another module drafted at) drafts something else.
    const KvRegion region = (*proposer)->kv_cache()->region();
    std::memset(region.base, 0xff, region.bytes);
    Proposer& p = **proposer;
    p.add_request(1, c.tokens);
    feed_target_states(h, p, 1, c.tokens);
    EXPECT_EQ(propose_for(p, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name;
    // A second call with nothing new drafts the same again (the drafting KV of the first call is
    // dropped and the last position recomputed), also after another target forward has
    // overwritten the capture buffers the states arrived in: what the head kept must be its own.
    const std::vector<std::int32_t> other(c.tokens.rbegin(), c.tokens.rend());
    feed_target_states(h, p, 2, other);  // key 2 was never added: only the forward counts
    EXPECT_EQ(propose_for(p, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name << " (second call)";
    p.remove_request(1, true);
    // The same prompt in chunks of 3 (the head reads the earlier chunks' rows from the host and
    // the last one's from the capture buffers) drafts the same.
    p.add_request(3, c.tokens);
    feed_target_states(h, p, 3, c.tokens, /*chunk=*/3);
    EXPECT_EQ(propose_for(p, {3}, {c.tokens}, c.k)[0], c.drafts) << c.name << " (prompt states in chunks of 3)";
    p.remove_request(3, true);
  }
}

// Drafting steps replayed from captured graphs (engine/model/forward_graphs.h; on the CPU, the
// ops recorded and run again): every layout still drafts the reference, call after call, and the
// heads' graphs were replayed.
TEST(DraftHeads, GraphReplayedDraftStepsDraftTheReference) {
  for (const HeadCase& c : head_cases()) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto proposer = make_proposer(head_config(c), context_for(h, c.target, /*graph_max_seqs=*/4));
    ASSERT_TRUE(proposer.ok()) << c.name << ": " << proposer.status();
    Proposer& p = **proposer;
    p.add_request(1, c.tokens);
    feed_target_states(h, p, 1, c.tokens);
    for (int call = 0; call < 3; ++call) {
      EXPECT_EQ(propose_for(p, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name << " call " << call;
    }
    if (const auto* heads = dynamic_cast<const HeadProposer*>(&p)) {
      EXPECT_GT(heads->head().graph_stats().replays, 0) << c.name;
    }
  }
}

// Forwards that ran without a graph (each graph's first run aside) of a head or draft model.
std::int64_t ungraphed_forwards(const Proposer& p) {
  const GraphStats* g = nullptr;
  if (const auto* heads = dynamic_cast<const HeadProposer*>(&p)) g = &heads->head().graph_stats();
  if (const auto* draft = dynamic_cast<const DraftModelProposer*>(&p)) g = &draft->model().graph_stats();
  BATON_CHECK(g != nullptr, "not a drafting proposer");
  return g->eager - g->captured;
}

// After a verification, each request's catch-up takes the tokens it accepted, a different number
// per request: padded to the longest, the catch-up replays a graph, and every request drafts what
// it drafts with graphs off.
TEST(DraftHeads, CatchUpsOfDifferentLengthsReplayGraphs) {
  for (const HeadCase& c : head_cases()) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto eager_or = make_proposer(head_config(c), context_for(h, c.target));
    auto graphed_or = make_proposer(head_config(c), context_for(h, c.target, /*graph_max_seqs=*/4));
    ASSERT_TRUE(eager_or.ok() && graphed_or.ok()) << c.name;
    Proposer& eager = **eager_or;
    Proposer& graphed = **graphed_or;
    const std::vector<RequestKey> keys = {1, 2, 3};
    std::vector<std::vector<std::int32_t>> tokens = {c.tokens, {c.tokens.rbegin(), c.tokens.rend()}, {}};
    tokens[2].assign(c.tokens.begin() + 3, c.tokens.end());
    for (Proposer* p : {&eager, &graphed}) {
      for (std::size_t i = 0; i < keys.size(); ++i) p->add_request(keys[i], tokens[i]);
    }
    std::vector<TestSequence> seqs;
    feed_next(h, {&eager, &graphed}, keys, tokens, seqs);
    EXPECT_EQ(propose_for(graphed, keys, tokens, c.k), propose_for(eager, keys, tokens, c.k)) << c.name;
    // Two steps that accept all k, none and 2, then 1, all and 3 of each request's own drafts (a
    // draft model has fed all but its last draft: only a request that accepted all k catches up
    // on two tokens).
    for (const std::vector<std::size_t>& accepted : {std::vector<std::size_t>{99, 0, 2}, {1, 99, 3}}) {
      const auto drafts = propose_for(eager, keys, tokens, c.k);
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::size_t n = std::min(accepted[i], drafts[i].size());
        tokens[i].insert(tokens[i].end(), drafts[i].begin(), drafts[i].begin() + static_cast<std::ptrdiff_t>(n));
        tokens[i].push_back(c.tokens[i]);  // the correction or bonus token
      }
      feed_next(h, {&eager, &graphed}, keys, tokens, seqs);
      const std::int64_t before = ungraphed_forwards(graphed);
      EXPECT_EQ(propose_for(graphed, keys, tokens, c.k), propose_for(eager, keys, tokens, c.k)) << c.name;
      EXPECT_EQ(ungraphed_forwards(graphed), before) << c.name << ": a catch-up ran without a graph";
    }
  }
}

// Several requests' states arriving together, in chunks, so that before_target_forward() moves
// several requests' rows to the host at once: each request drafts what it drafts fed alone.
TEST(DraftHeads, RequestsFedTogetherInChunksDraftWhatEachDraftsAlone) {
  for (const HeadCase& c : head_cases()) {
    if (c.method == "draft_model") continue;
    auto h = ModelHarness::load(fixture_path(c.target));
    auto proposer = make_proposer(head_config(c), context_for(h, c.target));
    ASSERT_TRUE(proposer.ok()) << c.name << ": " << proposer.status();
    Proposer& p = **proposer;
    // Three prompts of different lengths and contents.
    std::vector<std::vector<std::int32_t>> prompts = {c.tokens, {c.tokens.rbegin(), c.tokens.rend()}, {}};
    prompts[2].assign(c.tokens.begin() + 3, c.tokens.end());
    std::vector<std::vector<std::int32_t>> alone;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const RequestKey key = 100 + static_cast<RequestKey>(i);
      p.add_request(key, prompts[i]);
      feed_target_states(h, p, key, prompts[i]);
      alone.push_back(propose_for(p, {key}, {prompts[i]}, c.k)[0]);
      p.remove_request(key, true);
    }
    EXPECT_EQ(alone[0], c.drafts) << c.name;
    const std::vector<RequestKey> keys = {1, 2, 3};
    for (std::size_t i = 0; i < keys.size(); ++i) p.add_request(keys[i], prompts[i]);
    feed_together(h, p, keys, prompts, /*chunk=*/4);
    EXPECT_EQ(propose_for(p, keys, prompts, c.k), alone) << c.name;
  }
}

TEST(DraftHeads, CatchUpLogitsMatchTheReference) {
  for (const HeadCase& c : head_cases()) {
    if (c.method == "draft_model") continue;
    auto h = ModelHarness::load(fixture_path(c.target));
    const ProposerContext pc = context_for(h, c.target);
    HeadOptions ho{pc.max_num_batched_tokens, pc.max_num_seqs, pc.max_model_len, pc.block_size, std::nullopt};
    auto head = DraftHead::load(method_of(c.method), fixture_path("spec/" + c.name), h.model->config(), h.model->weights(),
                                *h.backend, ho);
    ASSERT_TRUE(head.ok()) << c.name << ": " << head.status();
    // Target states for positions [0, n - 1), then the head over the same positions.
    struct Capture : TargetStateConsumer {
      TargetStateSpec spec;
      std::vector<float> rows;
      TargetStateSpec target_states() const override { return spec; }
      absl::Status observe(RequestKey, std::int32_t, const TargetStateRows& r, std::int32_t n, std::int32_t) override {
        rows = interleave(r, n);
        return absl::OkStatus();
      }
    } capture;
    capture.spec = (*head)->target_states();
    struct Dummy : Proposer, TargetStateConsumer {
      Capture* c;
      std::string_view name() const override { return "capture"; }
      void add_request(RequestKey, std::span<const std::int32_t>) override {}
      void remove_request(RequestKey, bool) override {}
      absl::Status propose(std::span<ProposalRequest>) override { return absl::OkStatus(); }
      TargetStateSpec target_states() const override { return c->spec; }
      absl::Status observe(RequestKey k, std::int32_t s, const TargetStateRows& r, std::int32_t n, std::int32_t v) override {
        return c->observe(k, s, r, n, v);
      }
    } dummy;
    dummy.c = &capture;
    feed_target_states(h, dummy, 1, c.tokens);
    auto cache = KvCache::create(*h.backend, (*head)->kv_layout(), 16);
    ASSERT_TRUE(cache.ok());
    KvBlockPool pool(16, 16);
    TestSequence seq;
    seq.tokens.assign(c.tokens.begin() + 1, c.tokens.end());  // head position p consumes token p + 1
    ForwardBatch batch;
    batch.sequences.push_back(seq.chunk(pool, static_cast<std::int32_t>(seq.tokens.size())));
    std::vector<std::int32_t> last = {static_cast<std::int32_t>(seq.tokens.size()) - 1};
    batch.sequences[0].logits_indices = last;
    const TensorView features = (*head)->feature_input(static_cast<std::int64_t>(seq.tokens.size()),
                                                       (*head)->target_feature_width());
    ASSERT_EQ(static_cast<std::size_t>(features.numel()), capture.rows.size()) << c.name;
    h.backend->copy_to_device(features.data, capture.rows.data(), capture.rows.size() * sizeof(float));
    auto out = (*head)->forward(0, batch, features, /*from_target=*/true, *cache, /*logits_to_host=*/true);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    ASSERT_EQ(out->logits.size(), c.logits.size()) << c.name;
    double worst = 0;
    for (std::size_t i = 0; i < c.logits.size(); ++i) worst = std::max(worst, std::fabs(out->logits[i] - c.logits[i]));
    EXPECT_LT(worst, 2e-4) << c.name;
  }
}

TEST(DraftHeads, MismatchedDraftVocabularyIsRefused) {
  auto h = ModelHarness::load(fixture_path("llama-f32"));
  SpeculativeConfig sc;
  sc.method = SpecMethod::kDraftModel;
  sc.model = fixture_path("spec/draft-badvocab");
  sc.num_speculative_tokens = 3;
  auto p = make_proposer(sc, context_for(h, "llama-f32"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("vocab_size"));
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("draft-badvocab"));
}

// {"method": "mtp"} on a target with no MTP layers of its own: the error says why and what to give.
TEST(DraftHeads, MtpOnATargetWithoutMtpLayersSaysWhatToGive) {
  auto h = ModelHarness::load(fixture_path("llama-f32"));
  SpeculativeConfig sc;
  sc.method = SpecMethod::kMtp;
  sc.num_speculative_tokens = 1;
  auto p = make_proposer(sc, context_for(h, "llama-f32"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("num_nextn_predict_layers"));
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("no MTP layers"));
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("\"model\""));
}

// A head directory that is not there: a relative one is named with the directory it was resolved
// against (processes `baton up` starts, or a service manager, may run elsewhere than the user's
// shell), an absolute one as given; a file is not a directory.
TEST(DraftHeads, AMissingHeadDirectorySaysWhereItWasLookedFor) {
  auto h = ModelHarness::load(fixture_path("llama-f32"));
  SpeculativeConfig sc;
  sc.method = SpecMethod::kEagle3;
  sc.num_speculative_tokens = 2;
  sc.model = "no-such-dir/eagle3";
  auto p = make_proposer(sc, context_for(h, "llama-f32"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("`model` no-such-dir/eagle3 (relative to the current directory " + cwd));
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr(cwd + "/no-such-dir/eagle3"));
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("does not exist"));
  sc.model = "/no-such-dir/eagle3";
  p = make_proposer(sc, context_for(h, "llama-f32"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("`model` /no-such-dir/eagle3 does not exist"));
  sc.model = fixture_path("llama-f32") + "/config.json";
  p = make_proposer(sc, context_for(h, "llama-f32"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("is not a directory"));
}

}  // namespace
}  // namespace baton
