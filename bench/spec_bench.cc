// Speculative decoding benchmark: TPOT with speculation vs without, on the same prompts in the
// same process (a paired ratio per prompt, median reported), plus vLLM's acceptance metrics.
// Batch 1, greedy, so both runs produce the same tokens (the tool checks that too).
//
// usage: spec_bench --model DIR --prompts FILE.jsonl [--field prompt] [--num-prompts 20]
//                   [--max-tokens 64] [--threads N] --spec JSON [--spec JSON ...]
// Prints one JSON object per --spec on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "engine/engine.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace baton::bench {
namespace {

struct Args {
  std::string model, prompts, field = "prompt";
  int num_prompts = 20, max_tokens = 64, threads = 0;
  std::vector<std::string> specs;
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: spec_bench --model DIR --prompts FILE.jsonl [--field prompt] [--num-prompts N] "
                       "[--max-tokens N] [--threads N] --spec JSON [--spec JSON ...]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--prompts") a.prompts = v;
    else if (k == "--field") a.field = v;
    else if (k == "--num-prompts") a.num_prompts = std::stoi(v);
    else if (k == "--max-tokens") a.max_tokens = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--spec") a.specs.push_back(v);
    else usage();
  }
  if (a.model.empty() || a.prompts.empty() || a.specs.empty()) usage();
  return a;
}

struct RunResult {
  std::vector<std::int32_t> tokens;
  double tpot = 0;  // (latency - ttft) / (tokens - 1)
};

RunResult run_one(Engine& engine, const std::vector<std::int32_t>& prompt, int max_tokens, int index) {
  using Clock = std::chrono::steady_clock;
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;  // same length every time: TPOT compares like with like
  const std::string id = "b" + std::to_string(index);
  if (auto s = engine.add_request(id, prompt, p); !s.ok()) {
    std::fprintf(stderr, "spec_bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  RunResult r;
  const auto start = Clock::now();
  Clock::time_point first{};
  while (engine.has_unfinished()) {
    auto outs = engine.step();
    if (!outs.ok()) {
      std::fprintf(stderr, "spec_bench: %s\n", std::string(outs.status().message()).c_str());
      std::exit(1);
    }
    for (const auto& o : *outs) {
      for (const auto& t : o.new_tokens) {
        if (r.tokens.empty()) first = Clock::now();
        r.tokens.push_back(t.token);
      }
    }
  }
  const double decode = std::chrono::duration<double>(Clock::now() - first).count();
  (void)start;
  r.tpot = r.tokens.size() > 1 ? decode / static_cast<double>(r.tokens.size() - 1) : 0.0;
  return r;
}

std::unique_ptr<Engine> make_engine(const Args& a, const std::optional<SpeculativeConfig>& spec) {
  EngineConfig c;
  c.model_dir = a.model;
  c.backend.num_threads = a.threads;
  c.kv_cache_bytes = 512LL << 20;
  c.scheduler.max_num_seqs = 4;
  c.speculative = spec;
  auto e = Engine::create(c);
  if (!e.ok()) {
    std::fprintf(stderr, "spec_bench: %s\n", std::string(e.status().message()).c_str());
    std::exit(1);
  }
  return std::move(*e);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  using namespace baton;
  using namespace baton::bench;
  (void)init_logging("warn");
  const Args args = parse(argc, argv);
  auto tokenizer = Tokenizer::load(args.model);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "spec_bench: %s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  std::vector<std::vector<std::int32_t>> prompts;
  std::ifstream in(args.prompts);
  for (std::string line; std::getline(in, line) && static_cast<int>(prompts.size()) < args.num_prompts;) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains(args.field)) continue;
    prompts.push_back((*tokenizer)->encode(j[args.field].get<std::string>(), /*add_special_tokens=*/true));
  }
  if (prompts.empty()) {
    std::fprintf(stderr, "spec_bench: no prompts with field '%s' in %s\n", args.field.c_str(), args.prompts.c_str());
    return 1;
  }
  auto baseline = make_engine(args, std::nullopt);
  // Models with short contexts (the fixtures) keep each prompt's tail.
  int truncated = 0;
  const auto limit = static_cast<std::size_t>(baseline->max_model_len() - args.max_tokens - 1);
  for (auto& p : prompts) {
    if (p.size() > limit) {
      p.erase(p.begin(), p.end() - static_cast<std::ptrdiff_t>(limit));
      ++truncated;
    }
  }
  for (const std::string& spec_json : args.specs) {
    auto spec = SpeculativeConfig::parse(spec_json, NodeRole::kColocated);
    if (!spec.ok()) {
      std::fprintf(stderr, "spec_bench: %s\n", std::string(spec.status().message()).c_str());
      return 1;
    }
    auto engine = make_engine(args, *spec);
    std::vector<double> ratios, base_tpot, spec_tpot;
    int mismatches = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      // Alternate which runs first so drift in machine speed does not favour either.
      RunResult b, s;
      if (i % 2 == 0) {
        b = run_one(*baseline, prompts[i], args.max_tokens, static_cast<int>(i));
        s = run_one(*engine, prompts[i], args.max_tokens, static_cast<int>(i));
      } else {
        s = run_one(*engine, prompts[i], args.max_tokens, static_cast<int>(i));
        b = run_one(*baseline, prompts[i], args.max_tokens, static_cast<int>(i));
      }
      if (b.tokens != s.tokens) ++mismatches;
      base_tpot.push_back(b.tpot);
      spec_tpot.push_back(s.tpot);
      ratios.push_back(s.tpot / b.tpot);
    }
    const SpecDecodeStats& st = *engine->spec_stats();
    std::vector<double> per_position;
    for (std::int64_t a : st.accepted_per_position) {
      per_position.push_back(st.num_drafts > 0 ? static_cast<double>(a) / static_cast<double>(st.num_drafts) : 0.0);
    }
    nlohmann::json j = {{"model", args.model},
                        {"speculative_config", spec->to_json()},
                        {"prompts", prompts.size()},
                        {"prompts_truncated_to_fit", truncated},
                        {"max_tokens", args.max_tokens},
                        {"tpot_ms_baseline_median", median(base_tpot) * 1e3},
                        {"tpot_ms_spec_median", median(spec_tpot) * 1e3},
                        {"tpot_ratio_median", median(ratios)},  // spec / baseline, paired per prompt
                        {"speedup", 1.0 / median(ratios)},
                        {"mean_acceptance_length", st.mean_acceptance_length()},
                        {"acceptance_rate", st.acceptance_rate()},
                        {"acceptance_per_position", per_position},
                        {"greedy_mismatches", mismatches}};
    std::cout << j.dump() << std::endl;
  }
  return 0;
}
