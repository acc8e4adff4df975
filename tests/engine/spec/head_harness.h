// What the draft-head tests share (heads_test.cc, medusa_test.cc, dflash_test.cc): the reference's
// head entries (tools/fixtures/make_spec_fixtures.py), a proposer context on a loaded fixture
// target, and target forwards whose captured states are handed to proposers the way the engine hands them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/text_file.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/proposer_factory.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fixtures.h"
#include "tests/engine/model_harness.h"

namespace baton::testing::heads {

struct HeadCase {
  std::string name, target, method;
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> drafts;
  std::vector<double> logits;
  std::int32_t k = 0;
};

// The reference's entries of `method` (every one but Medusa's and DFlash's when empty: they have
// their own tests).
inline std::vector<HeadCase> head_cases(const std::string& method = "") {
  auto text = read_text_file(fixture_path("spec/reference.json"));
  BATON_CHECK(text.ok(), text.status().ToString());
  const auto j = nlohmann::json::parse(*text);
  std::vector<HeadCase> out;
  for (const auto& h : j["heads"]) {
    HeadCase c;
    c.name = h["name"];
    c.target = h["target"];
    c.method = h["method"];
    if (method.empty() ? c.method == "medusa" || c.method == "dflash" : c.method != method) continue;
    c.tokens = h["token_ids"].get<std::vector<std::int32_t>>();
    c.drafts = h["drafts"].get<std::vector<std::int32_t>>();
    c.logits = h["logits"].get<std::vector<double>>();
    c.k = h["k"];
    out.push_back(c);
  }
  return out;
}

// A copy of the fixture head spec/<name> with its config edited, in a directory of its own.
inline std::string edited_head_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  static int copies = 0;
  const std::string dir = ::testing::TempDir() + "edited-" + name + "-" + std::to_string(copies++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& f : std::filesystem::directory_iterator(fixture_path("spec/" + name))) {
    std::filesystem::copy_file(f.path(), dir + "/" + f.path().filename().string());
  }
  auto text = read_text_file(dir + "/config.json");
  BATON_CHECK(text.ok(), text.status().ToString());
  auto cfg = nlohmann::json::parse(*text);
  edit(cfg);
  std::ofstream(dir + "/config.json") << cfg.dump();
  return dir;
}

inline ProposerContext context_for(ModelHarness& h, const std::string& target, std::int32_t graph_max_seqs = 0) {
  ProposerContext pc;
  pc.target_dir = fixture_path(target);
  pc.target_config = &h.model->config();
  pc.target_weights = &h.model->weights();
  pc.backend = h.backend.get();
  pc.block_size = 16;
  pc.kv_cache_bytes = 4 << 20;
  pc.max_model_len = 256;
  pc.max_num_batched_tokens = 256;
  pc.max_num_seqs = 8;
  pc.graph_max_seqs = graph_max_seqs;
  return pc;
}

// One target forward over the next `chunk` (at most) positions of each request that are not fed
// yet ([seqs[i].computed, n - 1) of tokens[i]: those whose next token is known; `seqs` persists
// between calls, as the engine's requests do), its states handed to every proposer of `ps` that
// wants them, as the engine does: before_target_forward() before the forward, then the rows left
// in the forward's capture buffers (several requests' side by side). False when nothing was left.
inline bool feed_next(ModelHarness& h, const std::vector<Proposer*>& ps, const std::vector<RequestKey>& keys,
               const std::vector<std::vector<std::int32_t>>& tokens, std::vector<TestSequence>& seqs,
               std::int32_t chunk = std::numeric_limits<std::int32_t>::max()) {
  static std::uint64_t forward_id = 0;
  std::vector<TargetStateConsumer*> consumers;
  for (Proposer* p : ps) {
    if (auto* c = dynamic_cast<TargetStateConsumer*>(p)) consumers.push_back(c);
  }
  if (consumers.empty()) return false;
  const TargetStateSpec spec = consumers.front()->target_states();
  seqs.resize(tokens.size());
  for (TargetStateConsumer* c : consumers) c->before_target_forward();
  ForwardBatch batch;
  std::vector<std::int32_t> starts, counts;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    seqs[i].tokens = tokens[i];
    const auto n = static_cast<std::int32_t>(tokens[i].size()) - 1;
    starts.push_back(seqs[i].computed);
    counts.push_back(std::min(chunk, n - seqs[i].computed));
    if (counts.back() > 0) batch.sequences.push_back(seqs[i].chunk(*h.pool, counts.back()));
  }
  if (batch.sequences.empty()) return false;
  batch.capture_layer_inputs = spec.layer_inputs;
  batch.capture_final_hidden = spec.final_hidden;
  auto out = h.model->forward(batch, *h.cache, h.states.get());
  BATON_CHECK(out.ok(), out.status().ToString());
  std::vector<TensorView> views = out->layer_inputs;
  if (spec.final_hidden) views.push_back(out->final_hidden);
  ++forward_id;
  for (TargetStateConsumer* c : consumers) {
    std::int64_t row = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (counts[i] <= 0) continue;
      const absl::Status s = c->observe(keys[i], starts[i], TargetStateRows{views, row, forward_id}, counts[i], counts[i]);
      BATON_CHECK(s.ok(), s.ToString());
      row += counts[i];
    }
  }
  return true;
}

// The target over each prompt's positions [0, n - 1), in forwards that take the next `chunk`
// tokens of every prompt, its states handed to `p`, as over a (chunked) prefill.
inline void feed_together(ModelHarness& h, Proposer& p, const std::vector<RequestKey>& keys,
                   const std::vector<std::vector<std::int32_t>>& prompts,
                   std::int32_t chunk = std::numeric_limits<std::int32_t>::max()) {
  std::vector<TestSequence> seqs;
  while (feed_next(h, {&p}, keys, prompts, seqs, chunk)) {
  }
}

inline void feed_target_states(ModelHarness& h, Proposer& p, RequestKey key, const std::vector<std::int32_t>& tokens,
                        std::int32_t chunk = std::numeric_limits<std::int32_t>::max()) {
  feed_together(h, p, {key}, {tokens}, chunk);
}

// Drafts for each request (its tokens: the prompt plus 4 generated) from one propose() call.
inline std::vector<std::vector<std::int32_t>> propose_for(Proposer& p, const std::vector<RequestKey>& keys,
                                                   const std::vector<std::vector<std::int32_t>>& tokens, std::int32_t k) {
  std::vector<std::vector<std::int32_t>> drafts(keys.size());
  std::vector<ProposalRequest> reqs(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    reqs[i].key = keys[i];
    reqs[i].tokens = tokens[i];
    reqs[i].prompt_len = static_cast<std::int32_t>(tokens[i].size()) - 4;
    reqs[i].max_drafts = k;
    reqs[i].drafts = &drafts[i];
  }
  const absl::Status s = p.propose(reqs);
  BATON_CHECK(s.ok(), s.ToString());
  return drafts;
}

}  // namespace baton::testing::heads
