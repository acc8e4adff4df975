// The engines and jobs the prefill/decode hand-off tests share (handoff_test.cc,
// handoff_leases_test.cc): an engine per role on a fixture, prompts with repeated motifs (so
// n-gram and suffix drafts match) and without, greedy and seeded jobs, and a check that no pool
// still holds a block.
#pragma once

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"

namespace baton::testing {

inline constexpr int kDecodeK = 4;

struct EngineSetup {
  std::string target = "llama-f32";
  std::optional<SpeculativeConfig> spec;
  NodeRole role = NodeRole::kColocated;
  std::int32_t budget = 256;
  std::int32_t max_seqs = 16;
  // The CPU acting like a GPU whose memory the host cannot read: a P/D engine's KV then leaves
  // and arrives through its pools' host mirrors.
  bool discrete_memory = false;
  // With discrete_memory: transports read and write the pools themselves (NCCL's way), no mirrors.
  bool kv_transfer_in_device_memory = false;
  std::optional<DType> kv_cache_dtype;  // nullopt: the backend's (F32)
  EngineHooks hooks;
};

inline std::unique_ptr<Engine> make_engine(const EngineSetup& s) {
  EngineConfig c;
  c.model_dir = fixture_path(s.target);
  c.backend.num_threads = 2;
  c.kv_cache_bytes = 8 << 20;
  c.kv_cache_dtype = s.kv_cache_dtype;
  c.scheduler.max_num_batched_tokens = s.budget;
  c.scheduler.max_num_seqs = s.max_seqs;
  c.speculative = s.spec;
  c.role = s.role;
  c.backend.cpu_discrete_memory = s.discrete_memory;
  c.kv_transfer_in_device_memory = s.kv_transfer_in_device_memory;
  auto e = Engine::create(c, s.hooks);
  BATON_CHECK(e.ok(), e.status().ToString());
  return std::move(*e);
}

// Prompts with repeated motifs (so n-gram and suffix drafts match) and without.
inline std::vector<std::int32_t> prompt_for(std::mt19937& rng, std::int32_t vocab, int repeats) {
  std::vector<std::int32_t> motif(3 + rng() % 5), prompt;
  for (auto& t : motif) t = static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3));
  for (int r = 0; r <= repeats; ++r) prompt.insert(prompt.end(), motif.begin(), motif.end());
  prompt.push_back(static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3)));
  return prompt;
}

inline std::vector<Job> greedy_jobs(std::int32_t vocab, int n, const std::string& prefix) {
  std::mt19937 rng(17);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = prefix + std::to_string(i);
    j.prompt = prompt_for(rng, vocab, i % 3);
    j.params.temperature = 0;
    j.params.max_tokens = 10 + i * 2;
    j.params.ignore_eos = i % 2 == 0;
    if (i == 3) j.params.repetition_penalty = 1.3f;
    jobs.push_back(j);
  }
  return jobs;
}

inline std::vector<Job> seeded_jobs(std::int32_t vocab, int n) {
  std::mt19937 rng(29);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = "seed" + std::to_string(i);
    j.prompt = prompt_for(rng, vocab, 1 + i % 2);
    j.params.temperature = i % 3 == 0 ? 1.0f : 0.8f;
    if (i % 2 == 1) j.params.top_p = 0.9f;
    if (i % 5 == 4) j.params.frequency_penalty = 0.5f;
    j.params.seed = 1000 + static_cast<std::uint64_t>(i);
    j.params.max_tokens = 12;
    j.params.ignore_eos = true;
    if (i % 4 == 0) j.params.logprobs = 2;
    jobs.push_back(j);
  }
  return jobs;
}

inline void expect_no_blocks_held(const Engine& e, const std::string& what) {
  for (const KvPoolInfo& p : e.kv_pools()) {
    EXPECT_EQ(p.used, 0) << what << ": " << p.name << " pool still holds blocks";
    EXPECT_EQ(p.reserved, 0) << what << ": " << p.name << " pool";
  }
}

}  // namespace baton::testing
