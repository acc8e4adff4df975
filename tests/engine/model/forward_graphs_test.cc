// Forwards replayed from captured graphs (engine/model/forward_graphs.h) against the same forwards
// run op by op, on every fixture architecture and backend (the CUDA instances run real CUDA graphs
// and skip without a GPU): decode steps and verification steps padded to a bucket, steps whose
// sequences add different numbers of tokens (padded with fillers to the longest), hidden-state
// captures. Logits and hidden states must be bit-identical, step after
// step (so padding never writes KV: block 0, which padding reads, belongs to a real sequence), and
// the graphs must actually have been replayed.
#include <cstring>

#include "gtest/gtest.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/fixture_on_device.h"
#include "tests/engine/model_harness.h"

namespace baton {
namespace {

using testing::argmax;
using testing::fixture_path;
using testing::load_reference;
using testing::ModelHarness;
using testing::TestSequence;

std::vector<float> to_host(Backend& backend, const TensorView& v) {
  std::vector<float> host(static_cast<std::size_t>(v.numel()));
  backend.copy_to_host(host.data(), v.data, host.size() * sizeof(float));
  return host;
}

// One model and its sequences, stepped the same way in both runs.
struct ModelRun {
  ModelHarness h;
  std::vector<TestSequence> seqs;
};

class ForwardGraphsTest : public testing::FixtureOnDevice {};

// A step: these sequences add `q` tokens each (logits at all of them), optionally capturing hidden
// states; the first new token is the greedy pick of the sequence's last logits, the others
// (verification drafts) come from the prompt.
struct Step {
  std::vector<int> members;
  std::vector<std::int32_t> q;  // per member
  bool capture = false;
};

TEST_P(ForwardGraphsTest, ReplayedStepsAreBitIdenticalToEagerOnes) {
  const auto ref = load_reference(name());
  const auto path = fixture_path(name());
  ModelRun eager{ModelHarness::load(path, "auto", 2, 64, device(), /*graph_max_seqs=*/0), {}};
  ModelRun graphed{ModelHarness::load(path, "auto", 2, 64, device(), /*graph_max_seqs=*/8), {}};
  const std::int32_t num_layers = eager.h.model->config().num_layers;

  // Six prompts (rotations of the reference prompt, 9 to 14 tokens), each prefilled alone.
  std::vector<std::vector<float>> last_logits(6);
  for (ModelRun* r : {&eager, &graphed}) {
    r->seqs.resize(6);
    for (std::size_t s = 0; s < 6; ++s) {
      TestSequence& seq = r->seqs[s];
      const std::size_t len = 9 + s;
      for (std::size_t i = 0; i < len; ++i) seq.tokens.push_back(ref.prompt[(i + s) % ref.prompt.size()]);
      ForwardBatch b;
      b.sequences.push_back(seq.chunk(*r->h.pool, static_cast<std::int32_t>(len)));
      last_logits[s] = r->h.forward(b).back();
    }
  }
  ASSERT_EQ(graphed.seqs[0].table.blocks()[0], 0) << "padding reads block 0: a real sequence must own it";

  const std::vector<int> all = {0, 1, 2, 3, 4, 5};
  const std::vector<Step> steps = {
      {all, std::vector<std::int32_t>(6, 1)},  // decode, 6 padded to 8: captured
      {all, std::vector<std::int32_t>(6, 1)},  // replayed
      {all, std::vector<std::int32_t>(6, 1)},
      {{0, 1, 2}, {1, 1, 1}},                  // 3 padded to 4: captured
      {{3, 4, 5}, {1, 1, 1}},                  // replayed for other sequences
      {all, std::vector<std::int32_t>(6, 4)},  // verification of 3 drafts: captured
      {all, std::vector<std::int32_t>(6, 4)},  // replayed
      {{2}, {1}},                              // one sequence: captured
      {{2}, {1}},                              // replayed
      {all, {4, 1, 4, 2, 4, 4}},               // mixed lengths: the verification graph, with fillers
      {{0, 1, 2}, {1, 3, 2}},                  // mixed, 3 padded to 4 of 3 tokens: captured
      {{3, 4, 5}, {2, 3, 1}},                  // replayed
      {all, std::vector<std::int32_t>(6, 1), true},  // with hidden-state captures: a new graph
      {all, std::vector<std::int32_t>(6, 1), true},  // replayed
      {all, std::vector<std::int32_t>(6, 1)},        // the first graph again
  };
  for (std::size_t st = 0; st < steps.size(); ++st) {
    const Step& step = steps[st];
    // The same new tokens for both runs: the greedy pick, then prompt tokens as drafts.
    std::vector<std::vector<std::int32_t>> added;
    for (std::size_t m = 0; m < step.members.size(); ++m) {
      std::vector<std::int32_t> toks = {argmax(last_logits[static_cast<std::size_t>(step.members[m])])};
      for (std::int32_t j = 1; j < step.q[m]; ++j) toks.push_back(ref.prompt[(st + static_cast<std::size_t>(j)) % ref.prompt.size()]);
      added.push_back(toks);
    }
    std::vector<std::vector<float>> logits[2], states[2];
    ModelRun* runs[2] = {&eager, &graphed};
    for (int r = 0; r < 2; ++r) {
      ForwardBatch b;
      for (std::size_t m = 0; m < step.members.size(); ++m) {
        TestSequence& seq = runs[r]->seqs[static_cast<std::size_t>(step.members[m])];
        seq.tokens.insert(seq.tokens.end(), added[m].begin(), added[m].end());
        b.sequences.push_back(seq.chunk(*runs[r]->h.pool, step.q[m]));
      }
      if (step.capture) {
        b.capture_layer_inputs = {0, num_layers - 1};
        b.capture_final_hidden = true;
      }
      auto out = runs[r]->h.model->forward(b, *runs[r]->h.cache, runs[r]->h.states.get());
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->logits.dim(0), b.num_logits());
      const std::vector<float> flat = to_host(*runs[r]->h.backend, out->logits);
      const auto vocab = static_cast<std::size_t>(out->logits.dim(1));
      for (std::int64_t row = 0; row < out->logits.dim(0); ++row) {
        logits[r].emplace_back(flat.begin() + row * vocab, flat.begin() + (row + 1) * vocab);
      }
      if (step.capture) {
        for (const TensorView& v : out->layer_inputs) {
          ASSERT_EQ(v.dim(0), b.num_tokens());
          states[r].push_back(to_host(*runs[r]->h.backend, v));
        }
        ASSERT_EQ(out->final_hidden.dim(0), b.num_tokens());
        states[r].push_back(to_host(*runs[r]->h.backend, out->final_hidden));
      }
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    for (std::size_t row = 0; row < logits[0].size(); ++row) {
      ASSERT_EQ(std::memcmp(logits[0][row].data(), logits[1][row].data(), logits[0][row].size() * sizeof(float)), 0)
          << name() << " step " << st << " logits row " << row;
    }
    ASSERT_EQ(states[0], states[1]) << name() << " step " << st << " hidden states";
    // Each member's last row seeds its next step.
    std::size_t row = 0;
    for (std::size_t m = 0; m < step.members.size(); ++m) {
      row += static_cast<std::size_t>(step.q[m]);
      last_logits[static_cast<std::size_t>(step.members[m])] = logits[0][row - 1];
    }
  }
  const GraphStats& g = graphed.h.model->graph_stats();
  EXPECT_EQ(g.captured, 6) << name();
  EXPECT_EQ(g.replays, 9) << name();
  EXPECT_EQ(g.eager, 6 + 6) << name();  // prefills, each graph's first run
  EXPECT_EQ(eager.h.model->graph_stats().replays, 0);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, ForwardGraphsTest, testing::every_fixture_on_every_device(),
                         testing::fixture_on_device_name);

}  // namespace
}  // namespace baton
