// The speculative methods the engine tests run, on the fixture heads of
// tools/fixtures/make_spec_fixtures.py: every proposer and layout, both verification rules, greedy
// and probabilistic drafts.
#pragma once

#include <string>
#include <vector>

#include "engine/spec/config.h"
#include "tests/engine/fixtures.h"

namespace baton::testing {

struct MethodCase {
  std::string label;
  std::string target;
  std::string json;  // speculative_config without num_speculative_tokens and the closing brace
  bool probabilistic = false;  // drafts are sampled (their q enters verification)

  // The config with num_speculative_tokens = k for a node of `role`.
  SpeculativeConfig config(int k, NodeRole role = NodeRole::kColocated) const {
    auto c = SpeculativeConfig::parse(json + ", \"num_speculative_tokens\": " + std::to_string(k) + "}", role);
    BATON_CHECK(c.ok(), c.status().ToString());
    return *c;
  }
};

inline std::vector<MethodCase> method_cases() {
  const std::string spec = fixture_path("spec/");
  return {
      {"ngram", "llama-f32", R"({"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3)"},
      {"suffix", "llama-f32", R"({"method": "suffix")"},
      {"draft_model", "llama-f32", R"({"method": "draft_model", "model": ")" + spec + R"(draft-llama-f32")"},
      {"eagle", "llama-f32", R"({"method": "eagle", "model": ")" + spec + R"(eagle-llama-f32")"},
      {"eagle3", "llama-f32", R"({"method": "eagle3", "model": ")" + spec + R"(eagle3-llama-f32")"},
      {"eagle3_speculators", "llama-f32", R"({"method": "eagle3", "model": ")" + spec + R"(eagle3-speculators-llama-f32")"},
      {"eagle3_own_embed", "llama-f32", R"({"method": "eagle3", "model": ")" + spec + R"(eagle3-embed-llama-f32")"},
      {"mtp_deepseek", "llama-f32", R"({"method": "mtp", "model": ")" + spec + R"(mtp-deepseek-llama-f32")"},
      {"mtp2_deepseek", "llama-f32", R"({"method": "mtp", "model": ")" + spec + R"(mtp2-deepseek-llama-f32")"},
      {"mtp_qwen3next", "qwen3-bf16", R"({"method": "mtp", "model": ")" + spec + R"(mtp-qwen3next-qwen3-bf16")"},
      {"medusa", "llama-f32", R"({"method": "medusa", "model": ")" + spec + R"(medusa-llama-f32")"},
      {"medusa_trunc_probabilistic", "llama-f32",
       R"({"method": "medusa", "draft_sample_method": "probabilistic", "model": ")" + spec + R"(medusa-trunc-llama-f32")",
       true},
      {"draft_model_block", "llama-f32",
       R"({"method": "draft_model", "rejection_sample_method": "block", "model": ")" + spec + R"(draft-llama-f32")"},
      {"draft_model_probabilistic", "llama-f32",
       R"({"method": "draft_model", "draft_sample_method": "probabilistic", "model": ")" + spec + R"(draft-llama-f32")",
       true},
      {"eagle_probabilistic_block", "llama-f32",
       R"({"method": "eagle", "draft_sample_method": "probabilistic", "rejection_sample_method": "block", "model": ")" +
           spec + R"(eagle-llama-f32")",
       true},
      // The target drafting for itself: drafts are (almost) always accepted, so the accept, bonus
      // and partial-rollback paths run too (the random heads above are nearly always rejected).
      {"self_draft", "llama-f32", R"({"method": "draft_model", "model": ")" + fixture_path("llama-f32") + "\""},
      {"self_draft_block_probabilistic", "llama-f32",
       R"({"method": "draft_model", "rejection_sample_method": "block", "draft_sample_method": "probabilistic", "model": ")" +
           fixture_path("llama-f32") + "\"",
       true},
      // Mixture-of-experts targets: verification batches k + 1 positions whose tokens share experts.
      {"ngram_moe", "qwen3-moe-f32", R"({"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3)"},
      {"self_draft_moe", "qwen3-moe-bf16", R"({"method": "draft_model", "model": ")" + fixture_path("qwen3-moe-bf16") + "\""},
      // DFlash: non-causal with the target's LM head; a sliding-window layer and biases; causal
      // with a draft vocabulary, sampled.
      {"dflash", "llama-f32", R"({"method": "dflash", "model": ")" + spec + R"(dflash-llama-f32")"},
      {"dflash_swa", "llama-f32", R"({"method": "dflash", "model": ")" + spec + R"(dflash-swa-llama-f32")"},
      {"dflash_causal_probabilistic_block", "llama-f32",
       R"({"method": "dflash", "draft_sample_method": "probabilistic", "rejection_sample_method": "block", "model": ")" +
           spec + R"(dflash-causal-llama-f32")",
       true},
  };
}

}  // namespace baton::testing
