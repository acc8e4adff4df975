// What the speculative engine tests share: one batch of jobs that mixes speculating requests,
// requests without drafts and sampled ones, and an engine on a fixture model built the same way for
// each test.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"

namespace baton::testing {

inline std::map<std::string, std::vector<std::int32_t>> run(Engine& engine, const std::vector<Job>& jobs) {
  return testing::run_jobs(engine, jobs);
}

// Prompts with repeats (so n-gram and suffix find matches) and without.
inline std::vector<Job> jobs_for(std::int32_t vocab, bool include_sampled) {
  std::mt19937 rng(17);
  std::vector<Job> jobs;
  for (int i = 0; i < 8; ++i) {
    Job j;
    j.id = "g" + std::to_string(i);
    std::vector<std::int32_t> motif(3 + rng() % 5);
    for (auto& t : motif) t = static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3));
    const int repeats = i % 3;  // 0: no repetition at all
    for (int r = 0; r <= repeats; ++r) j.prompt.insert(j.prompt.end(), motif.begin(), motif.end());
    j.prompt.push_back(static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3)));
    j.params.temperature = 0;
    j.params.max_tokens = 12 + i * 3;
    j.params.ignore_eos = i % 2 == 0;
    if (i == 5) j.params.repetition_penalty = 1.3f;  // penalties see accepted drafts too
    if (i == 6) j.params.logit_bias = {{4, 3.0f}, {9, -100.0f}};  // verification sees the bias too
    jobs.push_back(j);
  }
  if (include_sampled) {
    for (int i = 0; i < 2; ++i) {
      Job j;
      j.id = "s" + std::to_string(i);
      j.prompt = jobs[static_cast<std::size_t>(i)].prompt;
      j.params.temperature = 0.9f;
      j.params.top_p = 0.95f;
      j.params.seed = 100 + static_cast<std::uint64_t>(i);
      if (i == 1) j.params.logit_bias = {{4, 1.5f}, {7, -2.0f}};
      j.params.max_tokens = 16;
      j.params.ignore_eos = true;
      jobs.push_back(j);
    }
  }
  return jobs;
}

inline std::unique_ptr<Engine> make_engine(const std::string& target, const std::optional<SpeculativeConfig>& spec,
                                           const std::string& cpu_isa = "auto", bool discrete_memory = false,
                                           GraphMode graphs = GraphMode::kAuto,
                                           std::optional<DType> kv_cache_dtype = std::nullopt, EngineHooks hooks = {}) {
  EngineConfig c;
  c.kv_cache_dtype = kv_cache_dtype;
  c.model_dir = fixture_path(target);
  c.backend.num_threads = 2;
  c.backend.cpu_isa = cpu_isa;
  c.backend.cpu_discrete_memory = discrete_memory;
  c.graphs = graphs;
  // The bundled hybrid's recurrent state (a group of 1 + k slots per sequence) needs more room.
  c.kv_cache_bytes = target == kBundledHybrid ? 256 << 20 : 8 << 20;
  c.scheduler.max_num_batched_tokens = 256;
  c.scheduler.max_num_seqs = 16;
  c.speculative = spec;
  auto e = Engine::create(c, std::move(hooks));
  BATON_CHECK(e.ok(), e.status().ToString());
  return std::move(*e);
}

}  // namespace baton::testing
