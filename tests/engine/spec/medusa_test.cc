// Medusa heads (engine/spec/medusa_head.h, medusa_proposer.h) on the fixture heads of
// tools/fixtures/make_spec_fixtures.py, in every layout vLLM loads: per-head LM heads over the
// whole vocabulary; a truncated vocabulary with token_map, biased two-layer blocks, the
// "medusa_heads." prefix and a logit scale; one shared LM head cut to the token_map at load. Their
// greedy drafts must equal the float64 reference's (tools/reference/medusa_ref.py), also when
// the state comes from host copies, chunked prompts, batches and a prefill/decode hand-off; bad
// checkpoints and hand-offs are refused with errors that name what is wrong.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/spec/medusa_head.h"
#include "engine/spec/medusa_proposer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/spec/head_harness.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::ModelHarness;
using testing::TestSequence;
using namespace testing::heads;

SpeculativeConfig medusa_config(const std::string& name, std::int32_t k) {
  SpeculativeConfig sc;
  sc.method = SpecMethod::kMedusa;
  sc.model = fixture_path("spec/" + name);
  sc.num_speculative_tokens = k;
  return sc;
}

std::unique_ptr<Proposer> make_medusa(ModelHarness& h, const HeadCase& c, std::int32_t k = 0) {
  auto p = make_proposer(medusa_config(c.name, k > 0 ? k : c.k), context_for(h, c.target));
  BATON_CHECK(p.ok(), c.name, ": ", p.status().ToString());
  return std::move(*p);
}

TEST(Medusa, GreedyDraftsEqualTheReferenceInEveryLayout) {
  const auto cases = head_cases("medusa");
  ASSERT_EQ(cases.size(), 3u);
  for (const HeadCase& c : cases) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto p = make_medusa(h, c);
    p->add_request(1, c.tokens);
    feed_target_states(h, *p, 1, c.tokens);
    // Straight from the forward's capture buffer.
    EXPECT_EQ(propose_for(*p, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name;
    // After another forward has overwritten that buffer: from the row kept on the host.
    const std::vector<std::int32_t> other(c.tokens.rbegin(), c.tokens.rend());
    feed_target_states(h, *p, 2, other);  // key 2 was never added: only the forward counts
    EXPECT_EQ(propose_for(*p, {1}, {c.tokens}, c.k)[0], c.drafts) << c.name << " (host row)";
    // Fewer drafts asked for: the reference's first ones.
    EXPECT_EQ(propose_for(*p, {1}, {c.tokens}, 2)[0], std::vector<std::int32_t>(c.drafts.begin(), c.drafts.begin() + 2))
        << c.name;
    p->remove_request(1, true);
    // The prompt in chunks of 3, batched with a second request fed alongside.
    p->add_request(3, c.tokens);
    p->add_request(4, other);
    feed_together(h, *p, {3, 4}, {c.tokens, other}, 3);
    const auto both = propose_for(*p, {4, 3}, {other, c.tokens}, c.k);
    EXPECT_EQ(both[1], c.drafts) << c.name << " (chunked, batched)";
    auto alone = make_medusa(h, c);
    alone->add_request(5, other);
    feed_target_states(h, *alone, 5, other);
    EXPECT_EQ(both[0], propose_for(*alone, {5}, {other}, c.k)[0]) << c.name << " (the batch's other request)";
  }
}

TEST(Medusa, HeadZeroLogitsMatchTheReference) {
  for (const HeadCase& c : head_cases("medusa")) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto head = MedusaHead::load(fixture_path("spec/" + c.name), h.model->config(), *h.backend, 4, std::nullopt);
    ASSERT_TRUE(head.ok()) << c.name << ": " << head.status();
    // The target's final hidden state at position n - 2, as the proposer would have kept it.
    struct Capture : Proposer, TargetStateConsumer {
      std::vector<float> last;
      std::string_view name() const override { return "capture"; }
      void add_request(RequestKey, std::span<const std::int32_t>) override {}
      void remove_request(RequestKey, bool) override {}
      absl::Status propose(std::span<ProposalRequest>) override { return absl::OkStatus(); }
      TargetStateSpec target_states() const override { return TargetStateSpec{{}, true}; }
      absl::Status observe(RequestKey, std::int32_t, const TargetStateRows& r, std::int32_t n, std::int32_t) override {
        const TensorView& t = r.tensors.front();
        const float* row = t.ptr<const float>() + (r.first_row + n - 1) * t.dim(1);
        last.assign(row, row + t.dim(1));
        return absl::OkStatus();
      }
    } capture;
    feed_target_states(h, capture, 1, c.tokens);
    ASSERT_EQ(capture.last.size(), static_cast<std::size_t>((*head)->hidden()));
    h.backend->copy_to_device((*head)->feature_input(1).data, capture.last.data(), capture.last.size() * sizeof(float));
    const TensorView logits = (*head)->forward(0, 1);
    std::vector<float> got(static_cast<std::size_t>((*head)->out_vocab()));
    h.backend->copy_to_host(got.data(), logits.data, got.size() * sizeof(float));
    ASSERT_EQ(got.size(), c.logits.size()) << c.name;
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) * (*head)->logit_scale() - c.logits[i]));
    }
    EXPECT_LT(worst, 2e-4) << c.name;
  }
}

// The state a prefill engine hands over drafts, on the decode side, what it drafts where it was
// computed; a hand-off of the wrong shape is refused and leaves no drafts behind.
TEST(Medusa, HandedOverStateDraftsTheReference) {
  for (const HeadCase& c : head_cases("medusa")) {
    auto h = ModelHarness::load(fixture_path(c.target));
    auto prefill = make_medusa(h, c, 1);
    prefill->add_request(1, c.tokens);
    feed_target_states(h, *prefill, 1, c.tokens);
    auto state = prefill->export_state(1);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->kv_positions, 0);
    EXPECT_EQ(state->feature_rows.size(), static_cast<std::size_t>(state->feature_width));
    EXPECT_EQ(prefill->handoff_kv_positions(static_cast<std::int32_t>(c.tokens.size())), 0);

    auto decode = make_medusa(h, c);
    decode->add_request(7, c.tokens);
    ASSERT_TRUE(decode->import_state(7, *state, c.tokens).ok());
    EXPECT_EQ(propose_for(*decode, {7}, {c.tokens}, c.k)[0], c.drafts) << c.name;

    ProposerHandoff wrong = *state;
    wrong.feature_rows.pop_back();
    decode->add_request(8, c.tokens);
    const absl::Status s = decode->import_state(8, wrong, c.tokens);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), ::testing::HasSubstr("medusa hand-off"));
    wrong = *state;
    wrong.kv_positions = 5;
    EXPECT_FALSE(decode->import_state(8, wrong, c.tokens).ok());
    EXPECT_TRUE(propose_for(*decode, {8}, {c.tokens}, c.k)[0].empty());
  }
}

// A row the target recomputes (preemption) is not drafted from, nor is a state that never arrived.
TEST(Medusa, StaleOrMissingStatesGiveNoDrafts) {
  const HeadCase c = head_cases("medusa").front();
  auto h = ModelHarness::load(fixture_path(c.target));
  auto p = make_medusa(h, c);
  p->add_request(1, c.tokens);
  EXPECT_TRUE(propose_for(*p, {1}, {c.tokens}, c.k)[0].empty());
  feed_target_states(h, *p, 1, c.tokens);
  p->reset_request(1);
  EXPECT_TRUE(propose_for(*p, {1}, {c.tokens}, c.k)[0].empty());
  // States up to an earlier position only: the newest token's producer is missing.
  std::vector<std::int32_t> shorter(c.tokens.begin(), c.tokens.end() - 1);
  auto q = make_medusa(h, c);
  q->add_request(2, c.tokens);
  feed_target_states(h, *q, 2, shorter);
  EXPECT_TRUE(propose_for(*q, {2}, {c.tokens}, c.k)[0].empty());
}

TEST(Medusa, BadCheckpointsAreRefusedNamingWhatIsWrong) {
  auto h = ModelHarness::load(fixture_path("llama-f32"));
  const auto refused = [&](const SpeculativeConfig& sc, const std::string& what) {
    auto p = make_proposer(sc, context_for(h, "llama-f32"));
    ASSERT_FALSE(p.ok()) << what;
    EXPECT_THAT(p.status().message(), ::testing::HasSubstr(what));
  };
  // More drafts than heads.
  refused(medusa_config("medusa-shared-llama-f32", 4), "exceeds the 3 heads");
  // The reference's list of heads that must be refused.
  auto text = read_text_file(fixture_path("spec/reference.json"));
  ASSERT_TRUE(text.ok());
  int listed = 0;
  const nlohmann::json reference = nlohmann::json::parse(*text);
  for (const auto& e : reference["errors"]) {
    if (e["method"] != "medusa") continue;
    ++listed;
    refused(medusa_config(e["name"], 1), "token_map");
  }
  EXPECT_EQ(listed, 1);
  const auto edited = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    SpeculativeConfig sc = medusa_config("medusa-llama-f32", 1);
    sc.model = edited_head_copy("medusa-llama-f32", edit);
    refused(sc, what);
  };
  edited([](nlohmann::json& j) { j["hidden_size"] = 64; }, "hidden_size 64 but the target's is");
  edited([](nlohmann::json& j) { j["vocab_size"] = 1000; }, "vocab_size 1000 but the target's is");
  // Without a head count, vLLM's default of 5 heads: this checkpoint has them.
  {
    SpeculativeConfig sc = medusa_config("medusa-llama-f32", 0);
    sc.model = edited_head_copy("medusa-llama-f32", [](nlohmann::json& j) { j.erase("medusa_num_heads"); });
    auto p = make_proposer(sc, context_for(h, "llama-f32"));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->default_num_speculative_tokens(), 5);
  }
  edited([](nlohmann::json& j) { j["medusa_num_heads"] = 100000; }, "`medusa_num_heads` must be an integer in [1, 64]");
  edited([](nlohmann::json& j) { j["num_heads"] = 2; }, "give the same count");
  edited([](nlohmann::json& j) { j["logit_scale"] = 0; }, "`logit_scale` must be a finite number > 0");
  edited([](nlohmann::json& j) { j["medusa_num_heads"] = 6; }, "blocks.5.layers.0.weight");
  edited([](nlohmann::json& j) { j["medusa_fc_bias"] = true; }, "blocks.0.layers.0.bias");
  edited([](nlohmann::json& j) { j["truncated_vocab_size"] = 100; }, "token_map");
}

}  // namespace
}  // namespace baton
