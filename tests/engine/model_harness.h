// A loaded model with its own KV cache and block pool, for tests that drive the forward pass
// directly (below the scheduler).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/state_cache.h"
#include "engine/model/transformer.h"
#include "kernels/backend_factory.h"

namespace baton::testing {

// Recurrent state of a hybrid fixture: every TestSequence takes its own group (round robin over
// kHarnessStateGroups) and each group has kHarnessStateSlots slots (the longest graph step).
inline constexpr std::int32_t kHarnessStateGroups = 64;
inline constexpr std::int32_t kHarnessStateSlots = 8;

struct ModelHarness {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<KvBlockPool> pool;
  std::unique_ptr<StateCache> states;  // models with linear-attention layers only

  static ModelHarness load(const std::string& dir, const std::string& isa = "auto", int threads = 2,
                           std::int32_t num_blocks = 64, Device device = {}, std::int32_t graph_max_seqs = 0) {
    ModelHarness h;
    BackendOptions bo;
    bo.device = device;
    bo.num_threads = threads;
    bo.cpu_isa = isa;
    auto backend = make_backend(bo);
    BATON_CHECK(backend.ok(), backend.status().ToString());
    h.backend = std::move(*backend);
    auto config = ModelConfig::load(dir);
    BATON_CHECK(config.ok(), config.status().ToString());
    auto ckpt = Checkpoint::open(dir);
    BATON_CHECK(ckpt.ok(), ckpt.status().ToString());
    auto weights = ModelWeights::load(*config, *ckpt, *h.backend);
    BATON_CHECK(weights.ok(), weights.status().ToString());
    TransformerOptions to;
    to.max_num_tokens = 256;
    to.max_num_seqs = 8;
    to.max_num_logits = 256;
    to.graph_max_seqs = graph_max_seqs;  // decode and verification forwards of up to 8 tokens per sequence
    to.graph_max_tokens_per_seq = 8;
    auto model = Transformer::create(*h.backend, *config, std::move(*weights), to);
    BATON_CHECK(model.ok(), model.status().ToString());
    h.model = std::move(*model);
    // Tests capture any hidden states they like: every layer, or EAGLE-3's three (which may repeat
    // a layer of a 2-layer fixture).
    const auto reserved = h.model->reserve_captures(static_cast<std::size_t>(std::max(config->num_layers, 3)), true);
    BATON_CHECK(reserved.ok(), reserved.ToString());
    auto cache = KvCache::create(*h.backend, h.model->kv_layout(), num_blocks);
    BATON_CHECK(cache.ok(), cache.status().ToString());
    h.cache = std::make_unique<KvCache>(std::move(*cache));
    h.pool = std::make_unique<KvBlockPool>(num_blocks, to.block_size);
    if (config->num_recurrent_layers() > 0) {
      auto states = StateCache::create(*h.backend, h.model->state_layout(kHarnessStateSlots), kHarnessStateGroups);
      BATON_CHECK(states.ok(), states.status().ToString());
      h.states = std::make_unique<StateCache>(std::move(*states));
    }
    return h;
  }

  std::int32_t vocab() const { return model->config().vocab_size; }

  // Runs one forward; returns the logits rows as host vectors.
  std::vector<std::vector<float>> forward(const ForwardBatch& batch) {
    auto out = model->forward(batch, *cache, states.get());
    BATON_CHECK(out.ok(), out.status().ToString());
    std::vector<std::vector<float>> rows(static_cast<std::size_t>(out->logits.dim(0)));
    for (std::size_t r = 0; r < rows.size(); ++r) {
      rows[r].resize(static_cast<std::size_t>(vocab()));
      backend->copy_to_host(rows[r].data(), out->logits.ptr<float>() + r * static_cast<std::size_t>(vocab()),
                            rows[r].size() * sizeof(float));
    }
    return rows;
  }
};

// A sequence's tokens and blocks, fed to the forward pass in chunks.
struct TestSequence {
  std::vector<std::int32_t> tokens;
  BlockTable table{16};
  std::int32_t computed = 0;
  std::vector<std::int32_t> logits_idx;
  // Its recurrent state (hybrid fixtures): its group, and the slot holding the state after the
  // last computed token.
  std::int32_t state_group = next_state_group();
  std::int32_t state_slot = -1;

  static std::int32_t next_state_group() {
    static std::int32_t next = 0;
    return next++ % kHarnessStateGroups;
  }

  // The next `n` tokens as a ForwardSequence with logits for all of them.
  ForwardSequence chunk(KvBlockPool& pool, std::int32_t n) {
    BATON_CHECK(table.grow_to(pool, computed + n), "out of blocks");
    logits_idx.resize(static_cast<std::size_t>(n));
    for (std::int32_t i = 0; i < n; ++i) logits_idx[static_cast<std::size_t>(i)] = i;
    ForwardSequence s;
    s.tokens = std::span<const std::int32_t>(tokens).subspan(static_cast<std::size_t>(computed), static_cast<std::size_t>(n));
    s.start_position = computed;
    s.block_table = table.blocks();
    s.logits_indices = logits_idx;
    s.state_group = state_group;
    s.state_slot = computed == 0 ? -1 : state_slot;
    state_slot = std::min(n, kHarnessStateSlots) - 1;
    computed += n;
    return s;
  }
};

inline std::int32_t argmax(const std::vector<float>& v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace baton::testing
