// Hidden-state capture (what EAGLE/MTP proposers will consume): the captured input of layer 0 is
// the embedding, the captured final-norm output is exactly what the logits are computed from, and
// captures are bit-identical however the tokens are chunked.
#include <cmath>
#include <cstring>

#include "engine/model/safetensors.h"
#include "gtest/gtest.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/model_harness.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::load_reference;
using testing::ModelHarness;
using testing::TestSequence;

std::vector<float> to_host(Backend& b, const TensorView& v) {
  std::vector<float> out(static_cast<std::size_t>(v.numel()));
  b.copy_to_host(out.data(), v.data, out.size() * sizeof(float));
  return out;
}

float weight_at(const TensorView& w, std::int64_t r, std::int64_t c) {
  const std::int64_t i = r * w.stride(0) + c;
  switch (w.dtype) {
    case DType::kF32: return w.ptr<const float>()[i];
    case DType::kBF16: return bf16_to_f32(w.ptr<const std::uint16_t>()[i]);
    case DType::kF16: return f16_to_f32(w.ptr<const std::uint16_t>()[i]);
    default: return NAN;
  }
}

TEST(HiddenStates, CapturesAreTheStatesTheModelUses) {
  for (const std::string name : {"llama3-bf16", "qwen3-bf16"}) {
    const auto ref = load_reference(name);
    auto h = ModelHarness::load(fixture_path(name));
    const ModelConfig& c = h.model->config();
    TestSequence seq;
    seq.tokens = ref.prompt;
    ForwardBatch batch;
    batch.sequences.push_back(seq.chunk(*h.pool, static_cast<std::int32_t>(ref.prompt.size())));
    batch.capture_layer_inputs = {0, c.num_layers - 1};
    batch.capture_final_hidden = true;
    auto out = h.model->forward(batch, *h.cache, h.states.get());
    ASSERT_TRUE(out.ok()) << out.status();
    const auto layer0 = to_host(*h.backend, out->layer_inputs[0]);
    const auto final_hidden = to_host(*h.backend, out->final_hidden);
    const auto logits = to_host(*h.backend, out->logits);
    const std::int64_t hid = c.hidden_size;
    const TensorView& embed = h.model->weights().embed;
    // The lm_head as stored in the checkpoint (the model's own copy may be packed for linear()).
    auto ckpt = Checkpoint::open(fixture_path(name));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const TensorInfo* stored = (*ckpt)->find("lm_head.weight");
    if (stored == nullptr) stored = (*ckpt)->find("model.embed_tokens.weight");  // tied embeddings
    ASSERT_NE(stored, nullptr);
    const TensorView head = TensorView::contiguous(const_cast<std::uint8_t*>(stored->data), stored->dtype,
                                                   {stored->shape[0], stored->shape[1]});
    for (std::size_t t = 0; t < ref.prompt.size(); ++t) {
      for (std::int64_t i = 0; i < hid; ++i) {
        ASSERT_EQ(layer0[t * static_cast<std::size_t>(hid) + static_cast<std::size_t>(i)], weight_at(embed, ref.prompt[t], i));
      }
      for (std::int64_t v = 0; v < c.vocab_size; ++v) {
        double dot = 0;
        for (std::int64_t i = 0; i < hid; ++i) dot += static_cast<double>(final_hidden[t * static_cast<std::size_t>(hid) + static_cast<std::size_t>(i)]) * weight_at(head, v, i);
        ASSERT_NEAR(logits[t * static_cast<std::size_t>(c.vocab_size) + static_cast<std::size_t>(v)], dot, 1e-4) << name;
      }
    }
  }
}

TEST(HiddenStates, EveryLayerInputAndTheFinalNormMatchTheReference) {
  for (const std::string& name : testing::fixture_names()) {
    const auto ref = load_reference(name);
    auto h = ModelHarness::load(fixture_path(name));
    const ModelConfig& c = h.model->config();
    TestSequence seq;
    seq.tokens = ref.prompt;
    ForwardBatch batch;
    batch.sequences.push_back(seq.chunk(*h.pool, static_cast<std::int32_t>(ref.prompt.size())));
    for (std::int32_t l = 0; l < c.num_layers; ++l) batch.capture_layer_inputs.push_back(l);
    batch.capture_final_hidden = true;
    auto out = h.model->forward(batch, *h.cache, h.states.get());
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(ref.hidden_states.size(), static_cast<std::size_t>(c.num_layers + 1));
    for (std::int32_t l = 0; l <= c.num_layers; ++l) {
      const auto got = to_host(*h.backend, l < c.num_layers ? out->layer_inputs[static_cast<std::size_t>(l)] : out->final_hidden);
      const auto& want = ref.hidden_states[static_cast<std::size_t>(l)];
      for (std::size_t t = 0; t < want.size(); ++t) {
        for (std::size_t i = 0; i < want[t].size(); ++i) {
          const double w = want[t][i];
          ASSERT_NEAR(got[t * want[t].size() + i], w, 1e-4 * std::max(1.0, std::fabs(w)))
              << name << " state " << l << " position " << t << " element " << i;
        }
      }
    }
  }
}

TEST(HiddenStates, ChunkingChangesNoBits) {
  const auto ref = load_reference("mistral-f16");
  auto capture = [&](const std::vector<std::int32_t>& chunks) {
    auto h = ModelHarness::load(fixture_path("mistral-f16"));
    TestSequence seq;
    seq.tokens = ref.prompt;
    std::vector<float> layer1, final_hidden;
    for (std::int32_t n : chunks) {
      ForwardBatch b;
      b.sequences.push_back(seq.chunk(*h.pool, n));
      b.capture_layer_inputs = {1};
      b.capture_final_hidden = true;
      auto out = h.model->forward(b, *h.cache, h.states.get());
      BATON_CHECK(out.ok(), out.status().ToString());
      const auto l = to_host(*h.backend, out->layer_inputs[0]);
      const auto f = to_host(*h.backend, out->final_hidden);
      layer1.insert(layer1.end(), l.begin(), l.end());
      final_hidden.insert(final_hidden.end(), f.begin(), f.end());
    }
    return std::make_pair(layer1, final_hidden);
  };
  const auto whole = capture({24});
  const auto pieces = capture({10, 1, 1, 5, 7});
  ASSERT_EQ(whole.first.size(), pieces.first.size());
  EXPECT_EQ(0, std::memcmp(whole.first.data(), pieces.first.data(), whole.first.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(whole.second.data(), pieces.second.data(), whole.second.size() * sizeof(float)));
}

}  // namespace
}  // namespace baton
