// Speculative decoding benchmark: TPOT and TTFT with speculation vs without, on the same prompts
// in the same process (paired per request, medians reported), plus vLLM's acceptance metrics.
// Three cases per method:
//   batch1_greedy  one request at a time, greedy (both runs must give the same tokens);
//   batch8_greedy  eight requests at a time (the same groups in both runs), greedy;
//   batch1_t0.8    one request at a time, temperature 0.8 with a seed per prompt (one-hot drafts
//                  give plain sampling's tokens exactly; probabilistic drafts the same law).
// Both engines have the same settings (prefix caching off in both: the prompts repeat between
// warm-up and runs) and are warmed up before anything is timed; the order of the two runs
// alternates per prompt so drift in machine speed favours neither.
//
// usage: spec_bench --model DIR --prompts FILE.jsonl [--field prompt] [--num-prompts 24]
//                   [--max-tokens 64] [--threads N] [--cases batch1_greedy,batch8_greedy,batch1_t0.8]
//                   [--cpu-isa auto|portable|avx2|avx512|avx512bf16] [--profile 0|1] [--adaptive off|on|both]
//                   [--device cpu|cuda[:N]] --spec JSON [--spec JSON ...]
// --device cuda runs both engines on the GPU (graphs as the engine's default: on). The step
// profile times ops on the host, which a GPU runs asynchronously, so it is off there (and
// --profile 1 is refused): TPOT, TTFT and acceptance are what a GPU run reports.
// --adaptive sets speculative_config's adaptive_draft_length in every --spec (both: each spec runs
// twice, fixed length first); off (the default) leaves the specs as given.
// Prints one JSON object per (method, case) on stdout, with "profile_baseline" and "profile_spec":
// the decode steps' time (steps that emit no request's first token) split by kernels/step_profile.h
// into GEMM, attention, norm/rope/activation, sampling/verification, proposer and overhead, per
// output token; and the same split per step for plain decode steps and for steps in which every
// request verified k drafts, with the ratio of the two (--profile 0 turns the timer off).
// "tokens_per_step_median" is each request's tokens after its first over the steps that made them
// (median over requests): the speedup if verifying cost nothing, the ceiling the proposer sets.
// "proposer_over_decode_step" and "verification_over_decode_step" split a full verification step
// into the proposal and the rest, in plain decode steps; "speedup_bound_free_proposer" is the mean
// acceptance length over the latter: the ceiling the target's verification cost sets.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/profile_sum.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "kernels/backend_factory.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace baton::bench {
namespace {

struct Args {
  std::string model, prompts, field = "prompt";
  int num_prompts = 24, max_tokens = 64, threads = 0;
  std::string cpu_isa = "auto";
  std::string device = "cpu";
  std::optional<bool> profile;  // default: on for the CPU, off (and refused) for a GPU
  std::vector<std::string> cases = {"batch1_greedy", "batch8_greedy", "batch1_t0.8"};
  std::vector<std::string> specs;
  std::string adaptive = "off";
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: spec_bench --model DIR --prompts FILE.jsonl [--field prompt] [--num-prompts N] "
                       "[--max-tokens N] [--threads N] [--cases a,b,c] [--cpu-isa ISA] [--profile 0|1] "
                       "[--adaptive off|on|both] [--device cpu|cuda[:N]] --spec JSON [--spec JSON ...]\n");
  std::exit(2);
}

[[noreturn]] void die(const absl::Status& s) {
  std::fprintf(stderr, "spec_bench: %s\n", std::string(s.message()).c_str());
  std::exit(1);
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
    else if (k == "--cpu-isa") a.cpu_isa = v;
    else if (k == "--spec") a.specs.push_back(v);
    else if (k == "--profile") a.profile = v != "0";
    else if (k == "--adaptive") a.adaptive = v;
    else if (k == "--device") a.device = v;
    else if (k == "--cases") {
      a.cases.clear();
      std::istringstream in(v);
      for (std::string c; std::getline(in, c, ',');) a.cases.push_back(c);
    } else {
      usage();
    }
  }
  if (a.model.empty() || a.prompts.empty() || a.specs.empty()) usage();
  const auto device = parse_device(a.device);
  if (!device.ok()) die(device.status());
  const bool gpu = device->type != DeviceType::kCpu;
  if (gpu && a.profile.value_or(false)) {
    die(absl::InvalidArgumentError("--profile 1 times ops on the host, which a GPU runs asynchronously: "
                                   "the split would be wrong; use --profile 0 with --device cuda"));
  }
  if (!a.profile) a.profile = !gpu;
  if (a.adaptive != "off") {
    if (a.adaptive != "on" && a.adaptive != "both") usage();
    std::vector<std::string> specs;
    for (const std::string& s : a.specs) {
      nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
      if (!j.is_object()) {
        std::fprintf(stderr, "spec_bench: --spec is not a JSON object: %s\n", s.c_str());
        std::exit(2);
      }
      if (a.adaptive == "both") {
        j["adaptive_draft_length"] = false;
        specs.push_back(j.dump());
      }
      j["adaptive_draft_length"] = true;
      specs.push_back(j.dump());
    }
    a.specs = std::move(specs);
  }
  return a;
}

struct Case {
  std::string name;
  int batch = 1;
  float temperature = 0.0f;
};

Case case_named(const std::string& name) {
  if (name == "batch1_greedy") return {name, 1, 0.0f};
  if (name == "batch8_greedy") return {name, 8, 0.0f};
  if (name == "batch1_t0.8") return {name, 1, 0.8f};
  std::fprintf(stderr, "spec_bench: unknown case %s\n", name.c_str());
  std::exit(2);
}

struct RequestResult {
  std::vector<std::int32_t> tokens;
  double ttft = 0;  // s, from the engine's output times
  double tpot = 0;  // s, (latency - ttft) / (tokens - 1)
  int decode_steps = 0;  // engine steps that gave it tokens after its first
};

// Where run_group adds its decode steps' profile (steps that emit no request's first token).
struct StepProfiles {
  ProfileSum per_token;   // every decode step, per output token
  ProfileSum full_steps;  // per step: steps in which every request verified k drafts (with
                          // speculation) or every decode step (without)
  int k = 0;              // drafts per request in a full step; 0: no speculation
};

// Runs one group of prompts together to completion; results in group order.
std::vector<RequestResult> run_group(Engine& engine, const std::vector<std::vector<std::int32_t>>& prompts,
                                     std::size_t first, std::size_t count, const Case& c, int max_tokens,
                                     StepProfiles* profile = nullptr) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = first; i < first + count; ++i) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.seed = 1234 + i;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;  // same length every time: TPOT compares like with like
    const std::string id = "p" + std::to_string(i);
    if (auto s = engine.add_request(id, prompts[i], p); !s.ok()) die(s);
    index[id] = i - first;
  }
  std::vector<RequestResult> out(count);
  while (engine.has_unfinished()) {
    StepProfile::reset();
    const std::int64_t drafts_before = engine.spec_stats() != nullptr ? engine.spec_stats()->num_draft_tokens : 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto outs = engine.step();
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!outs.ok()) die(outs.status());
    bool decode_only = true;
    std::size_t emitted = 0;
    for (const RequestOutput& o : *outs) {
      decode_only = decode_only && !out[index.at(o.request_id)].tokens.empty();
      emitted += o.new_tokens.size();
    }
    if (profile != nullptr && decode_only && emitted > 0) {
      const auto totals = StepProfile::totals();
      profile->per_token.add(totals, step_s, static_cast<double>(emitted));
      const std::int64_t drafts =
          (engine.spec_stats() != nullptr ? engine.spec_stats()->num_draft_tokens : 0) - drafts_before;
      if (drafts == static_cast<std::int64_t>(profile->k) * static_cast<std::int64_t>(outs->size())) {
        profile->full_steps.add(totals, step_s);
      }
    }
    for (const RequestOutput& o : *outs) {
      RequestResult& r = out[index.at(o.request_id)];
      if (!r.tokens.empty() && !o.new_tokens.empty()) ++r.decode_steps;
      for (const TokenOutput& t : o.new_tokens) r.tokens.push_back(t.token);
      if (!o.finished) continue;
      r.ttft = std::chrono::duration<double>(o.first_token_time - o.arrival_time).count();
      const double decode = std::chrono::duration<double>(o.finish_time - o.first_token_time).count();
      r.tpot = r.tokens.size() > 1 ? decode / static_cast<double>(r.tokens.size() - 1) : 0.0;
    }
  }
  return out;
}

std::unique_ptr<Engine> make_engine(const Args& a, const std::optional<SpeculativeConfig>& spec) {
  EngineConfig c;
  c.model_dir = a.model;
  c.backend.num_threads = a.threads;
  c.backend.cpu_isa = a.cpu_isa;
  c.backend.device = *parse_device(a.device);
  c.kv_cache_bytes = 512LL << 20;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.enable_prefix_caching = false;  // equal settings: heads need it off, so both run without
  c.speculative = spec;
  auto e = Engine::create(c);
  if (!e.ok()) die(e.status());
  return std::move(*e);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

SpecDecodeStats minus(const SpecDecodeStats& a, const SpecDecodeStats& b) {
  SpecDecodeStats d;
  d.num_drafts = a.num_drafts - b.num_drafts;
  d.num_draft_tokens = a.num_draft_tokens - b.num_draft_tokens;
  d.num_accepted_tokens = a.num_accepted_tokens - b.num_accepted_tokens;
  for (std::size_t i = 0; i < a.accepted_per_position.size(); ++i) {
    d.accepted_per_position.push_back(a.accepted_per_position[i] -
                                      (i < b.accepted_per_position.size() ? b.accepted_per_position[i] : 0));
  }
  for (std::size_t i = 0; i < a.proposals_by_length.size(); ++i) {
    d.proposals_by_length.push_back(a.proposals_by_length[i] -
                                    (i < b.proposals_by_length.size() ? b.proposals_by_length[i] : 0));
  }
  return d;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  using namespace baton;
  using namespace baton::bench;
  (void)init_logging("warn");
  const Args args = parse(argc, argv);
  StepProfile::enable(*args.profile);
  auto tokenizer = Tokenizer::load(args.model);
  if (!tokenizer.ok()) die(tokenizer.status());
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
  const Case warm{"warm-up", 8, 0.0f};
  run_group(*baseline, prompts, 0, std::min<std::size_t>(8, prompts.size()), warm, args.max_tokens);
  for (const std::string& spec_json : args.specs) {
    auto spec = SpeculativeConfig::parse(spec_json, NodeRole::kColocated);
    if (!spec.ok()) die(spec.status());
    auto engine = make_engine(args, *spec);
    run_group(*engine, prompts, 0, std::min<std::size_t>(8, prompts.size()), warm, args.max_tokens);
    for (const std::string& case_name : args.cases) {
      const Case c = case_named(case_name);
      const SpecDecodeStats before = *engine->spec_stats();
      std::vector<double> tpot_ratio, ttft_ratio, base_tpot, spec_tpot, base_ttft, spec_ttft, tokens_per_step;
      int mismatches = 0;
      // Output tokens (position by position, the longer output's extra ones counting as different)
      // that differ from the baseline's: 0 for every lossless rule where the tokens must match.
      std::int64_t differing_tokens = 0, output_tokens = 0;
      std::size_t group = 0;
      StepProfiles base_profile, spec_profile;
      spec_profile.k = spec->num_speculative_tokens;
      for (std::size_t first = 0; first < prompts.size(); first += static_cast<std::size_t>(c.batch), ++group) {
        const std::size_t n = std::min(static_cast<std::size_t>(c.batch), prompts.size() - first);
        std::vector<RequestResult> b, s;
        if (group % 2 == 0) {
          b = run_group(*baseline, prompts, first, n, c, args.max_tokens, &base_profile);
          s = run_group(*engine, prompts, first, n, c, args.max_tokens, &spec_profile);
        } else {
          s = run_group(*engine, prompts, first, n, c, args.max_tokens, &spec_profile);
          b = run_group(*baseline, prompts, first, n, c, args.max_tokens, &base_profile);
        }
        for (std::size_t i = 0; i < n; ++i) {
          mismatches += b[i].tokens != s[i].tokens;
          const std::size_t longer = std::max(b[i].tokens.size(), s[i].tokens.size());
          output_tokens += static_cast<std::int64_t>(longer);
          for (std::size_t t = 0; t < longer; ++t) {
            differing_tokens += t >= b[i].tokens.size() || t >= s[i].tokens.size() || b[i].tokens[t] != s[i].tokens[t];
          }
          base_tpot.push_back(b[i].tpot);
          spec_tpot.push_back(s[i].tpot);
          base_ttft.push_back(b[i].ttft);
          spec_ttft.push_back(s[i].ttft);
          tpot_ratio.push_back(s[i].tpot / b[i].tpot);
          if (s[i].decode_steps > 0) {
            tokens_per_step.push_back(static_cast<double>(s[i].tokens.size() - 1) / s[i].decode_steps);
          }
          ttft_ratio.push_back(s[i].ttft / b[i].ttft);
        }
      }
      const SpecDecodeStats st = minus(*engine->spec_stats(), before);
      std::vector<double> per_position;
      for (std::int64_t a : st.accepted_per_position) {
        per_position.push_back(st.num_drafts > 0 ? static_cast<double>(a) / static_cast<double>(st.num_drafts) : 0.0);
      }
      nlohmann::json j = {{"model", args.model},
                          {"cpu_isa", args.cpu_isa},
                          {"device", args.device},
                          {"case", c.name},
                          {"batch", c.batch},
                          {"temperature", c.temperature},
                          {"speculative_config", spec->to_json()},
                          {"prompts", prompts.size()},
                          {"prompts_truncated_to_fit", truncated},
                          {"max_tokens", args.max_tokens},
                          {"tpot_ms_baseline_median", median(base_tpot) * 1e3},
                          {"tpot_ms_spec_median", median(spec_tpot) * 1e3},
                          {"tpot_ratio_median", median(tpot_ratio)},  // spec / baseline, paired per request
                          {"speedup", 1.0 / median(tpot_ratio)},
                          // Tokens per decode step per request (median over requests): the speedup
                          // if a step with drafts cost no more than a plain one, so the ceiling the
                          // proposer's guesses set.
                          {"tokens_per_step_median", tokens_per_step.empty() ? 0.0 : median(tokens_per_step)},
                          {"ttft_ms_baseline_median", median(base_ttft) * 1e3},
                          {"ttft_ms_spec_median", median(spec_ttft) * 1e3},
                          {"ttft_ratio_median", median(ttft_ratio)},
                          {"mean_acceptance_length", st.mean_acceptance_length()},
                          {"acceptance_rate", st.acceptance_rate()},
                          {"acceptance_per_position", per_position},
                          // Proposal calls by the draft length they asked for (0..k): all at k
                          // unless adaptive_draft_length chose otherwise.
                          {"proposals_by_length", st.proposals_by_length},
                          // Greedy, and sampling with one-hot drafts, must give identical tokens
                          // (unless the verification is lossy: entropy verification).
                          {"token_mismatches", mismatches},
                          {"differing_token_share",
                           output_tokens > 0 ? static_cast<double>(differing_tokens) / static_cast<double>(output_tokens) : 0.0},
                          {"lossless", spec->lossless()}};
      if (*args.profile) {
        j["profile_baseline"] = base_profile.per_token.to_json();  // seconds per output token, by class
        j["profile_spec"] = spec_profile.per_token.to_json();
        // Seconds per step: a plain decode step, and a step that verified k drafts per request
        // (its proposer time included); their ratio is what one verification costs.
        j["profile_decode_step"] = base_profile.full_steps.to_json();
        j["profile_full_verification_step"] = spec_profile.full_steps.to_json();
        j["full_verification_steps"] = spec_profile.full_steps.steps;
        if (base_profile.full_steps.steps > 0 && spec_profile.full_steps.steps > 0) {
          const double decode_s = base_profile.full_steps.step_seconds / base_profile.full_steps.steps;
          const double verify_s = spec_profile.full_steps.step_seconds / spec_profile.full_steps.steps;
          j["full_verification_step_over_decode_step"] = verify_s / decode_s;
          // Split into the proposer's share (the cost of proposing k drafts) and the rest (the
          // target verifying k + 1 positions, in decode steps). The mean acceptance length over the
          // latter is the speedup a proposer that cost nothing would reach: the ceiling the
          // target's verification cost sets on this machine.
          const auto& full = spec_profile.full_steps;
          const double proposer_s = full.seconds[static_cast<int>(ProfileClass::kProposer)] / full.steps;
          const double verification = (verify_s - proposer_s) / decode_s;
          j["proposer_over_decode_step"] = proposer_s / decode_s;
          j["verification_over_decode_step"] = verification;
          if (verification > 0) j["speedup_bound_free_proposer"] = st.mean_acceptance_length() / verification;
        }
      }
      std::cout << j.dump() << std::endl;
    }
  }
  return 0;
}
