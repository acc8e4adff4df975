// The DFlash drafter (engine/spec/dflash_drafter.h, dflash_proposer.h) on the fixture drafters of
// tools/fixtures/make_spec_fixtures.py: non-causal with the target's LM head, and causal with its
// own LM head over a draft vocabulary (d2t) in the older config layout. Their greedy drafts must
// equal the float64 reference's (tools/reference/dflash_ref.py), also when the context arrives in
// chunks, beside another request, after a second call, and through a prefill/decode hand-off of
// its KV; missing states give no drafts, and bad checkpoints and hand-offs are refused with errors
// that name what is wrong.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/spec/dflash_proposer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/spec/head_harness.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::ModelHarness;
using namespace testing::heads;

SpeculativeConfig dflash_config(const std::string& dir, std::int32_t k) {
  SpeculativeConfig sc;
  sc.method = SpecMethod::kDflash;
  sc.model = dir;
  sc.num_speculative_tokens = k;
  return sc;
}

std::unique_ptr<Proposer> make_dflash(ModelHarness& h, const HeadCase& c, std::int32_t k = 0) {
  auto p = make_proposer(dflash_config(fixture_path("spec/" + c.name), k > 0 ? k : c.k), context_for(h, c.target));
  BATON_CHECK(p.ok(), c.name, ": ", p.status().ToString());
  return std::move(*p);
}

// Garbage in every KV slot: a drafter that reads a slot it never wrote drafts something else.
void poison_kv(Proposer& p) {
  const KvRegion region = p.kv_cache()->region();
  std::memset(region.base, 0xff, region.bytes);
}

TEST(DFlash, GreedyDraftsEqualTheReference) {
  const auto cases = head_cases("dflash");
  ASSERT_EQ(cases.size(), 3u);  // non-causal; causal with a draft vocabulary; sliding window and biases
  for (const HeadCase& c : cases) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto p = make_dflash(h, c);
    poison_kv(*p);
    p->add_request(1, c.tokens);
    feed_target_states(h, *p, 1, c.tokens);
    EXPECT_EQ(propose_for(*p, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name;
    // Nothing new, and another target forward has overwritten the capture buffers: the context
    // lives in the drafter's KV, and the last call's block KV is overwritten by this one's.
    const std::vector<std::int32_t> other(c.tokens.rbegin(), c.tokens.rend());
    feed_target_states(h, *p, 2, other);  // key 2 was never added: only the forward counts
    EXPECT_EQ(propose_for(*p, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name << " (second call)";
    // Fewer drafts asked for: the same block runs, so the reference's first ones.
    EXPECT_EQ(propose_for(*p, {1}, {c.tokens}, 2)[0], std::vector<std::int32_t>(c.drafts.begin(), c.drafts.begin() + 2))
        << c.name;
    p->remove_request(1, true);
    // The prompt in chunks of 3, batched with a second request fed alongside.
    p->add_request(3, c.tokens);
    p->add_request(4, other);
    feed_together(h, *p, {3, 4}, {c.tokens, other}, 3);
    const auto both = propose_for(*p, {4, 3}, {other, c.tokens}, c.k);
    EXPECT_EQ(both[1], c.drafts) << c.name << " (chunked, batched)";
    auto alone = make_dflash(h, c);
    alone->add_request(5, other);
    feed_target_states(h, *alone, 5, other);
    EXPECT_EQ(both[0], propose_for(*alone, {5}, {other}, c.k)[0]) << c.name << " (the batch's other request)";
  }
}

// Block forwards replayed from captured graphs (on the CPU, the ops recorded and run again): the
// drafts stay the reference's call after call, and a batch of three (padded to a graph of four
// sequences) drafts what the drafter drafts without graphs.
TEST(DFlash, GraphReplayedBlocksDraftTheReference) {
  for (const HeadCase& c : head_cases("dflash")) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto made = make_proposer(dflash_config(fixture_path("spec/" + c.name), c.k),
                              context_for(h, c.target, /*graph_max_seqs=*/4));
    ASSERT_TRUE(made.ok()) << c.name << ": " << made.status();
    Proposer& graphed = **made;
    graphed.add_request(1, c.tokens);
    feed_target_states(h, graphed, 1, c.tokens);
    for (int call = 0; call < 3; ++call) {
      EXPECT_EQ(propose_for(graphed, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name << " call " << call;
    }
    // Fewer drafts asked for: the same block, the reference's first ones (rows gathered after the replay).
    EXPECT_EQ(propose_for(graphed, {1}, {c.tokens}, 2)[0], std::vector<std::int32_t>(c.drafts.begin(), c.drafts.begin() + 2))
        << c.name;
    const GraphStats& g = dynamic_cast<const DFlashProposer&>(graphed).drafter().graph_stats();
    EXPECT_EQ(g.captured, 1) << c.name;
    EXPECT_EQ(g.replays, 3) << c.name;

    const std::vector<std::int32_t> reversed(c.tokens.rbegin(), c.tokens.rend());
    const std::vector<std::int32_t> shorter(c.tokens.begin() + 3, c.tokens.end());
    auto eager = make_dflash(h, c);
    for (Proposer* p : {&graphed, eager.get()}) {
      p->add_request(2, reversed);
      p->add_request(3, shorter);
      feed_together(h, *p, {2, 3}, {reversed, shorter}, 5);
    }
    eager->add_request(1, c.tokens);
    feed_target_states(h, *eager, 1, c.tokens);
    const auto got = propose_for(graphed, {3, 1, 2}, {shorter, c.tokens, reversed}, c.k);
    EXPECT_EQ(got, propose_for(*eager, {3, 1, 2}, {shorter, c.tokens, reversed}, c.k)) << c.name;
    EXPECT_EQ(got[1], c.drafts) << c.name;
    EXPECT_EQ(g.captured, 2) << c.name << ": one graph for 1 sequence, one for 4";
  }
}

// Beyond the argmax: a probabilistic draft's q row is softmax of its block row's logits, so row 1's
// q equals softmax of the reference's block-row-1 logits (heads over the target's vocabulary).
// This catches what moves logits without moving a well-separated argmax (a missing bias, say).
TEST(DFlash, DraftProbabilitiesEqualTheReferenceSoftmax) {
  int checked = 0;
  for (const HeadCase& c : head_cases("dflash")) {
    auto h = ModelHarness::load(fixture_path(c.target));
    if (static_cast<std::int32_t>(c.logits.size()) != h.vocab()) continue;  // a draft vocabulary
    SpeculativeConfig sc = dflash_config(fixture_path("spec/" + c.name), c.k);
    sc.draft_sample_method = DraftSampleMethod::kProbabilistic;
    auto made = make_proposer(sc, context_for(h, c.target));
    ASSERT_TRUE(made.ok()) << made.status();
    Proposer& p = **made;
    p.add_request(1, c.tokens);
    feed_target_states(h, p, 1, c.tokens);
    std::vector<std::int32_t> drafts;
    std::vector<float> q;
    SamplingParams sampling;  // temperature 1: q is the plain softmax
    RandomStream rng(7, RandomPurpose::kDraft, static_cast<std::int64_t>(c.tokens.size()));
    ProposalRequest r;
    r.key = 1;
    r.tokens = c.tokens;
    r.prompt_len = static_cast<std::int32_t>(c.tokens.size()) - 4;
    r.max_drafts = c.k;
    r.drafts = &drafts;
    r.draft_probs = &q;
    r.sampling = &sampling;
    r.draft_rng = &rng;
    std::vector<ProposalRequest> reqs{r};
    ASSERT_TRUE(p.propose(reqs).ok());
    ASSERT_EQ(q.size(), static_cast<std::size_t>(c.k) * c.logits.size()) << c.name;
    const double top = *std::max_element(c.logits.begin(), c.logits.end());
    double sum = 0;
    for (double l : c.logits) sum += std::exp(l - top);
    double worst = 0;
    for (std::size_t i = 0; i < c.logits.size(); ++i) {
      worst = std::max(worst, std::fabs(q[i] - std::exp(c.logits[i] - top) / sum));
    }
    EXPECT_LT(worst, 1e-5) << c.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);  // dflash-llama-f32 and dflash-swa-llama-f32
}

// The drafts follow the context: one more accepted position (its state and token) moves the block
// on, and drafting from it equals drafting from scratch over the longer sequence.
TEST(DFlash, ContextGrownStepByStepDraftsWhatAFreshContextDrafts) {
  for (const HeadCase& c : head_cases("dflash")) {
    auto h = ModelHarness::load(fixture_path(c.target));
    const std::vector<std::int32_t> shorter(c.tokens.begin(), c.tokens.end() - 3);
    auto stepwise = make_dflash(h, c);
    stepwise->add_request(1, shorter);
    std::vector<testing::TestSequence> seqs;
    while (feed_next(h, {stepwise.get()}, {1}, {shorter}, seqs)) {
    }
    EXPECT_EQ(propose_for(*stepwise, {1}, {shorter}, c.k)[0].size(), static_cast<std::size_t>(c.k));
    while (feed_next(h, {stepwise.get()}, {1}, {c.tokens}, seqs)) {  // the 3 new positions
    }
    EXPECT_EQ(propose_for(*stepwise, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name;
  }
}

// Copies the KV of `from`'s blocks into `to`'s, as a transport does.
void copy_blocks(Backend& b, KvCache& src, const std::vector<BlockId>& from, KvCache& dst, const std::vector<BlockId>& to) {
  ASSERT_EQ(from.size(), to.size());
  for (std::int32_t l = 0; l < src.layout().num_layers; ++l) {
    const TensorView s = src.layer(l), d = dst.layer(l);
    const std::int64_t per_block = s.numel() / s.dim(0);
    const TensorView s2 = s.reshape({s.dim(0), per_block}), d2 = d.reshape({d.dim(0), per_block});
    for (std::size_t i = 0; i < from.size(); ++i) b.copy(s2.slice0(from[i], from[i] + 1), d2.slice0(to[i], to[i] + 1));
  }
}

// The context a prefill engine computed, moved into a decode engine's reserved blocks, drafts
// there what it drafts where it was computed; a hand-off of the wrong shape is refused, and one
// with less context than the prompt leaves the request without drafts.
TEST(DFlash, HandedOverContextDraftsTheReference) {
  for (const HeadCase& c : head_cases("dflash")) {
    auto h = ModelHarness::load(fixture_path(c.target));
    const auto prompt_len = static_cast<std::int32_t>(c.tokens.size()) - 1;  // tokens: prompt + first token
    auto prefill = make_dflash(h, c, 1);
    prefill->add_request(1, c.tokens);
    feed_target_states(h, *prefill, 1, c.tokens);
    EXPECT_EQ(propose_for(*prefill, {1}, {c.tokens}, 1)[0].size(), 1u);
    auto state = prefill->export_state(1);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->kv_positions, prompt_len);
    EXPECT_TRUE(state->feature_rows.empty());
    EXPECT_EQ(prefill->handoff_kv_positions(prompt_len), prompt_len);

    auto decode = make_dflash(h, c);
    poison_kv(*decode);
    auto reserved = decode->reserve_state(7, prompt_len);
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    copy_blocks(*h.backend, *prefill->kv_cache(), state->kv_blocks, *decode->kv_cache(), *reserved);
    decode->add_request(7, c.tokens);
    ASSERT_TRUE(decode->import_state(7, *state, c.tokens).ok());
    EXPECT_EQ(propose_for(*decode, {7}, {c.tokens}, c.k)[0], c.drafts) << c.name;

    ASSERT_TRUE(decode->reserve_state(8, prompt_len).ok());
    ProposerHandoff wrong = *state;
    wrong.feature_rows.assign(4, 0.0f);
    wrong.feature_width = 4;
    absl::Status s = decode->import_state(8, wrong, c.tokens);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), ::testing::HasSubstr("dflash hand-off"));
    wrong = *state;
    wrong.kv_positions = prompt_len + 1;
    EXPECT_EQ(decode->import_state(8, wrong, c.tokens).code(), absl::StatusCode::kInvalidArgument);
    // Less context than the prompt (the prefill side's pool ran out): accepted, never drafted from.
    wrong = *state;
    wrong.kv_positions = 16;
    wrong.kv_blocks.resize(1);
    ASSERT_TRUE(decode->import_state(8, wrong, c.tokens).ok());
    EXPECT_TRUE(propose_for(*decode, {8}, {c.tokens}, c.k)[0].empty());
  }
}

// No drafts without the whole context: before any state, after a reset (preemption), or when the
// states stop short of the newest token's.
TEST(DFlash, MissingStatesGiveNoDrafts) {
  const HeadCase c = head_cases("dflash").front();
  auto h = ModelHarness::load(fixture_path(c.target));
  auto p = make_dflash(h, c);
  p->add_request(1, c.tokens);
  EXPECT_TRUE(propose_for(*p, {1}, {c.tokens}, c.k)[0].empty());
  feed_target_states(h, *p, 1, c.tokens);
  p->reset_request(1);
  EXPECT_TRUE(propose_for(*p, {1}, {c.tokens}, c.k)[0].empty());
  // Recomputed after the reset: drafts again, the reference's.
  feed_target_states(h, *p, 1, c.tokens);
  EXPECT_EQ(propose_for(*p, {1}, {c.tokens}, c.k)[0], c.drafts);
  const std::vector<std::int32_t> shorter(c.tokens.begin(), c.tokens.end() - 1);
  p->add_request(2, c.tokens);
  feed_target_states(h, *p, 2, shorter);
  EXPECT_TRUE(propose_for(*p, {2}, {c.tokens}, c.k)[0].empty());
}

TEST(DFlash, BadCheckpointsAreRefusedNamingWhatIsWrong) {
  auto h = ModelHarness::load(fixture_path("llama-f32"));
  const auto refused = [&](const SpeculativeConfig& sc, const std::string& what) {
    auto p = make_proposer(sc, context_for(h, "llama-f32"));
    ASSERT_FALSE(p.ok()) << what;
    EXPECT_THAT(p.status().message(), ::testing::HasSubstr(what));
  };
  const std::string plain = "dflash-llama-f32";
  // Trained on blocks of 8: at most 7 drafts.
  refused(dflash_config(fixture_path("spec/" + plain), 8), "drafts at most 7 tokens per step");
  // The reference's list of drafters that must be refused.
  auto text = read_text_file(fixture_path("spec/reference.json"));
  ASSERT_TRUE(text.ok());
  int listed = 0;
  const nlohmann::json reference = nlohmann::json::parse(*text);
  for (const auto& e : reference["errors"]) {
    if (e["method"] != "dflash") continue;
    ++listed;
    refused(dflash_config(fixture_path("spec/" + e["name"].get<std::string>()), 1), "outside the target's 2 layers");
  }
  EXPECT_EQ(listed, 1);
  const auto edited = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    refused(dflash_config(edited_head_copy(plain, edit), 1), what);
  };
  edited([](nlohmann::json& j) { j["hidden_size"] = 64; }, "hidden_size 64 differs from the target's");
  edited([](nlohmann::json& j) { j["dflash_config"].erase("mask_token_id"); }, "mask_token_id` is required");
  edited([](nlohmann::json& j) { j["dflash_config"]["mask_token_id"] = 100000; }, "mask_token_id 100000 is outside");
  edited([](nlohmann::json& j) { j["dflash_config"].erase("target_layer_ids"); }, "target_layer_ids` must list");
  edited([](nlohmann::json& j) { j["dflash_config"]["target_layer_ids"] = {0, 0}; }, "lists layer 0 twice");
  edited([](nlohmann::json& j) { j["dflash_config"]["target_layer_ids"] = {1, 0}; }, "list it last");
  edited([](nlohmann::json& j) { j["num_target_layers"] = 36; }, "num_target_layers is 36");
  edited([](nlohmann::json& j) { j["layer_types"] = {"full_attention"}; }, "layer_types");
  edited(
      [](nlohmann::json& j) {
        j["layer_types"] = {"sliding_attention", "full_attention"};
        j["sliding_window"] = 4;
        j["is_causal"] = false;
      },
      "layer 0 is a non-causal sliding-window layer");
  edited([](nlohmann::json& j) { j["architectures"] = {"DFlash2DraftModel"}; }, "DFlash2DraftModel");
  edited([](nlohmann::json& j) { j["dflash_config"]["input_embedding_scale"] = 2.0; }, "input_embedding_scale 2.0");
  edited([](nlohmann::json& j) { j["output_multiplier"] = 0.5; }, "output_multiplier 0.5");
  edited([](nlohmann::json& j) { j["final_logit_softcapping"] = 30.0; }, "final_logit_softcapping");
  edited([](nlohmann::json& j) { j["dflash_config"]["use_swa"] = true; }, "use_swa");
  edited([](nlohmann::json& j) { j["num_hidden_layers"] = 3; }, "layers.2.");
}

}  // namespace
}  // namespace baton
