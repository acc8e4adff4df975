// The recurrent state of a hybrid model (the Qwen3-Next, Qwen3.5 and Nemotron-H fixtures and the
// bundled trained baton-tiny-hybrid) through the forward pass: a verification-shaped step leaves in
// slot j exactly the state plain decoding has after token j, so a rejection in the middle of a draft continues
// bit for bit as if the rejected tokens never came; chunked prefill keeps only its final state;
// bad state references are refused with the sequence named. Also the StateCache's layout and
// StateGroupPool's bookkeeping.
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/model_harness.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using testing::fixture_path;
using testing::load_reference;
using testing::ModelHarness;
using testing::TestSequence;

// Every recurrent layer's slot `slot` of `group`, concatenated, on the host.
std::vector<float> state_of(const ModelHarness& h, std::int32_t group, std::int32_t slot) {
  std::vector<float> out;
  for (std::int32_t l = 0; l < h.states->layout().num_layers; ++l) {
    const TensorView v = h.states->slot(l, group, slot);
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(v.numel()));
    h.backend->copy_to_host(out.data() + at, v.data, static_cast<std::size_t>(v.numel()) * sizeof(float));
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A prompt and what follows it: a fixture's reference prompt and greedy continuation, or for the
// bundled trained hybrid a fixed run of its vocabulary's tokens (the test compares plain and
// speculative steps over the same tokens, whichever they are).
struct Text {
  std::vector<std::int32_t> prompt, rest;
};

Text text_for(const std::string& model) {
  if (model == testing::kBundledHybrid) {
    Text t;
    for (std::int32_t i = 0; i < 36; ++i) (i < 28 ? t.prompt : t.rest).push_back(257 + (i * 733) % 3800);
    return t;
  }
  const auto ref = load_reference(model);
  return Text{ref.prompt, ref.greedy};
}

class RecurrentState : public ::testing::TestWithParam<std::string> {};

TEST_P(RecurrentState, VerificationLeavesEveryDraftsStateAndARejectionContinuesExactly) {
  const Text ref = text_for(GetParam());
  std::vector<std::int32_t> text = ref.prompt;
  text.insert(text.end(), ref.rest.begin(), ref.rest.end());
  const auto prompt = static_cast<std::int32_t>(ref.prompt.size());
  constexpr std::int32_t kDrafts = 3;  // a verification step of 1 + 3 tokens

  // Plain decoding: the prompt, then one token a forward; the state after each token.
  auto plain = ModelHarness::load(fixture_path(GetParam()));
  TestSequence p;
  p.tokens = text;
  ForwardBatch b;
  b.sequences = {p.chunk(*plain.pool, prompt)};
  plain.forward(b);
  std::vector<std::vector<float>> states, logits;
  for (std::int32_t t = 0; t < 1 + kDrafts + 2; ++t) {
    b.sequences = {p.chunk(*plain.pool, 1)};
    logits.push_back(plain.forward(b).back());
    states.push_back(state_of(plain, p.state_group, p.state_slot));
  }

  // Speculative: the same prompt, then 1 + kDrafts tokens in one forward.
  auto spec = ModelHarness::load(fixture_path(GetParam()));
  TestSequence s;
  s.tokens = text;
  b.sequences = {s.chunk(*spec.pool, prompt)};
  spec.forward(b);
  b.sequences = {s.chunk(*spec.pool, 1 + kDrafts)};
  const auto verified = spec.forward(b);
  for (std::int32_t j = 0; j <= kDrafts; ++j) {
    EXPECT_TRUE(same_bits(verified[static_cast<std::size_t>(j)], logits[static_cast<std::size_t>(j)])) << "row " << j;
    EXPECT_TRUE(same_bits(state_of(spec, s.state_group, j), states[static_cast<std::size_t>(j)]))
        << GetParam() << ": slot " << j << " is not the state after token " << j;
  }
  // A rejection after the first draft: keep tokens 0 and 1 (slot 1), drop the rest, and go on
  // from the state after token 1 with the token plain decoding fed next.
  constexpr std::int32_t kAccepted = 1;
  s.computed = prompt + 1 + kAccepted;
  s.state_slot = kAccepted;
  b.sequences = {s.chunk(*spec.pool, 1)};
  const auto next = spec.forward(b);
  EXPECT_TRUE(same_bits(next.back(), logits[1 + kAccepted])) << GetParam();
  EXPECT_TRUE(same_bits(state_of(spec, s.state_group, 0), states[1 + kAccepted])) << GetParam();
}

TEST_P(RecurrentState, ChunkedPrefillKeepsTheFinalStateOnly) {
  const Text ref = text_for(GetParam());
  auto whole = ModelHarness::load(fixture_path(GetParam()));
  TestSequence w;
  w.tokens = ref.prompt;
  ForwardBatch b;
  b.sequences = {w.chunk(*whole.pool, 24)};  // longer than the slots: the final state in slot 7
  whole.forward(b);
  EXPECT_EQ(w.state_slot, testing::kHarnessStateSlots - 1);
  auto pieces = ModelHarness::load(fixture_path(GetParam()));
  TestSequence c;
  c.tokens = ref.prompt;
  for (std::int32_t n : {10, 1, 3, 10}) {
    b.sequences = {c.chunk(*pieces.pool, n)};
    pieces.forward(b);
  }
  EXPECT_TRUE(same_bits(state_of(whole, w.state_group, w.state_slot), state_of(pieces, c.state_group, c.state_slot)));
}

INSTANTIATE_TEST_SUITE_P(Hybrids, RecurrentState,
                         ::testing::Values("qwen3-next-f32", "qwen3-next-bf16", "nemotron-h-f32", "nemotron-h-bf16",
                                           "qwen35-f32", "qwen35-bf16", testing::kBundledHybrid),
                         [](const auto& p) { return testing::test_name_for(p.param); });

TEST(RecurrentStateRefusals, BadStateReferencesNameTheSequence) {
  auto h = ModelHarness::load(fixture_path("qwen3-next-f32"));
  const std::vector<std::int32_t> tokens = {5, 6, 7};
  std::vector<BlockId> blocks = {0};
  const std::vector<std::int32_t> idx = {2};
  ForwardSequence seq;
  seq.tokens = tokens;
  seq.block_table = blocks;
  seq.logits_indices = idx;
  seq.state_group = 0;
  const auto refused = [&](std::vector<ForwardSequence> seqs) {
    ForwardBatch b;
    b.sequences = std::move(seqs);
    auto out = h.model->forward(b, *h.cache, h.states.get());
    return out.ok() ? std::string("ok") : std::string(out.status().message());
  };
  ForwardSequence later = seq;
  later.start_position = 3;
  later.state_slot = -1;
  EXPECT_THAT(refused({later}), HasSubstr("sequence 0: state slot -1 at position 3"));
  ForwardSequence fresh_with_slot = seq;
  fresh_with_slot.state_slot = 0;
  EXPECT_THAT(refused({fresh_with_slot}), HasSubstr("state slot 0 at position 0"));
  ForwardSequence outside = seq;
  outside.state_group = testing::kHarnessStateGroups;
  EXPECT_THAT(refused({outside}), HasSubstr("sequence 0: state group 64 outside the 64"));
  ForwardSequence slot_outside = later;
  slot_outside.state_slot = testing::kHarnessStateSlots;
  EXPECT_THAT(refused({slot_outside}), HasSubstr("state slot 8"));
  std::vector<BlockId> other_blocks = {1};
  ForwardSequence twin = seq;
  twin.block_table = other_blocks;
  EXPECT_THAT(refused({seq, twin}), HasSubstr("sequences 0 and 1 share state group 0"));
  // No state cache at all.
  ForwardBatch b;
  b.sequences = {seq};
  auto none = h.model->forward(b, *h.cache);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("needs a recurrent state cache"));
  EXPECT_EQ(refused({seq}), "ok");
}

TEST(StateCache, LayoutAndGroupsAreAccountedFor) {
  auto h = ModelHarness::load(fixture_path("qwen3-next-f32"));
  const StateCacheLayout l = h.model->state_layout(4);
  // Two DeltaNet layers; conv keeps 3 inputs of 2*2*16 + 4*8 channels; 4 heads of 16 x 8.
  EXPECT_EQ(l.num_layers, 2);
  EXPECT_EQ(l.conv_floats, 3 * 96);
  EXPECT_EQ(l.recurrent_floats, 4 * 16 * 8);
  EXPECT_EQ(l.bytes_per_group(), 2LL * 4 * (3 * 96 + 4 * 16 * 8) * 4);
  EXPECT_EQ(h.model->kv_layout().num_layers, 2);  // the attention layers only
  EXPECT_FALSE(StateCache::create(*h.backend, l, 0).ok());

  StateGroupPool pool(2);
  const std::int32_t a = pool.allocate(), b = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.allocate(), -1);
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_DEATH(pool.free(5), "freed but not held");
}

}  // namespace
}  // namespace baton
