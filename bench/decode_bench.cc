// Decode and prefill speed of the engine, as fractions of this machine's memory-bandwidth floor.
//
// A decode step must read every weight matrix once (whatever the batch), so its floor is
// weight bytes / read bandwidth; both are measured here, in the same run, with the same threads.
// With experts (Qwen3-MoE), the bytes are those one token reads (num_experts_per_tok experts per
// layer): the floor of a batch-1 step; larger batches read more experts, so theirs is only a bound.
// Prints one JSON object per configuration on stdout.
//
// With --profile 1 (the default) each decode line also splits the step into GEMM, attention,
// norm/rope/activation, sampling/verification, proposer and overhead (kernels/step_profile.h).
// --verify-k K (default 4, 0: skip; skipped for hybrid models) adds a "verify" line: batch-1 steps that verify K drafts from
// the model itself as draft model (greedy, so every draft is accepted and every step verifies K + 1
// tokens); its forward time over a batch-1 decode forward of the same engine (a request with
// speculation off) is the verification/decode cost ratio, forward_over_decode_forward (over the
// plain engine's decode forward, whose weights are another copy: forward_over_plain_engine_...).
// The prefill line also times OpenBLAS sgemm (F32) on the same GEMM shapes in the same run.
//
// Every line also has a compute floor: the step's matrix flops over this machine's measured F32
// FMA peak, or VDPBF16PS peak for the avx512bf16 tier on BF16 weights (bench/compute_peak.h;
// attention flops left out), and "roofline_step_seconds", the larger
// of the two floors. Decode lines for batch > 1 add their throughput over batch 1's, and the most
// that ratio could be if this batch ran at its roofline while batch 1 stays as measured
// ("roofline_throughput_over_batch1"), or at its roofline plus the time to read the KV cache its
// attention reads ("roofline_with_kv_throughput_over_batch1": attention runs between the GEMMs,
// so its reads add to theirs).
//
// Decode batches and the verification run in --rounds rounds (each batch size in turn, then the
// verification), and the ratios (throughput over batch 1, verification over decode) are the median
// over rounds of each round's paired ratio: a machine whose speed drifts moves both sides of a
// ratio together. The other figures are medians over all timed steps of all rounds.
//
// "fraction_of_bandwidth_floor" compares the median step with the fastest probe of the whole run
// (before and after all rounds). On a host whose memory speed swings by 2x between minutes that
// mostly measures the swing, so the batch-1 line also has "fraction_of_bandwidth_floor_paired":
// each round's batch-1 run is bracketed by probes, its floor uses the faster of the two, and the
// figure is the median over rounds of those paired fractions.
//
// --context N (default 16) gives every decoding request (and the verifying one) an N-token prompt,
// so each step attends over about N cached positions (a hybrid's linear-attention layers read a
// fixed-size recurrent state instead, whatever N); --kv-cache-dtype auto|float32|bfloat16 picks
// the cache's elements. Decode and verify lines then add the KV bytes a step reads (the cached
// positions, K and V, every layer) and "fraction_of_bandwidth_floor_with_kv", the floor that reads
// the weights and those bytes over the step (the verify line: over its target forward): at long
// contexts the cache, not the weights, is most of a step.
//
// usage: decode_bench --model DIR [--batches 1,8,32] [--steps 32] [--rounds 5] [--prefill-tokens 512] [--threads N]
//                     [--cpu-isa auto|avx2|avx512|avx512bf16] [--profile 0|1] [--verify-k K]
//                     [--context 16] [--kv-cache-dtype auto|float32|bfloat16]
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/compute_peak.h"
#include "bench/memory_bandwidth.h"
#include "bench/openblas_peer.h"
#include "bench/profile_sum.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/step_profile.h"
#include "nlohmann/json.hpp"

namespace baton::bench {
namespace {

struct Args {
  std::string model;
  std::vector<int> batches = {1, 8, 32};
  int steps = 32;
  int rounds = 5;
  int prefill_tokens = 512;
  int threads = 0;
  std::string cpu_isa = "auto";
  bool profile = true;
  int verify_k = 4;
  int context = 16;                     // prompt tokens of each decoding request
  std::optional<DType> kv_cache_dtype;  // nullopt: the engine's default (the activations')
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--rounds") a.rounds = std::max(1, std::stoi(v));
    else if (k == "--prefill-tokens") a.prefill_tokens = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--cpu-isa") a.cpu_isa = v;
    else if (k == "--profile") a.profile = v != "0";
    else if (k == "--verify-k") a.verify_k = std::stoi(v);
    else if (k == "--context") a.context = std::max(1, std::stoi(v));
    else if (k == "--kv-cache-dtype") {
      if (v == "float32") a.kv_cache_dtype = DType::kF32;
      else if (v == "bfloat16") a.kv_cache_dtype = DType::kBF16;
      else if (v != "auto") {
        std::fprintf(stderr, "--kv-cache-dtype must be auto, float32 or bfloat16\n");
        std::exit(2);
      }
    }
    else if (k == "--batches") {
      a.batches.clear();
      std::size_t pos = 0;
      while (pos < v.size()) {
        const std::size_t c = std::min(v.find(',', pos), v.size());
        a.batches.push_back(std::stoi(v.substr(pos, c - pos)));
        pos = c + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "usage: decode_bench --model DIR [--batches 1,8,32] [--steps N] [--rounds N] [--prefill-tokens N]\n");
    std::exit(2);
  }
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// KV bytes of one cached position (K and V, every attention layer) in the engine's cache.
double kv_bytes_per_position(const ModelConfig& c, DType dtype) {
  return 2.0 * c.num_attention_layers() * c.num_kv_heads * c.head_dim * static_cast<double>(dtype_size(dtype));
}

std::unique_ptr<Engine> make_engine(const Args& a, int max_seqs, int draft_k = 0) {
  auto config = ModelConfig::load(a.model);
  if (!config.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", std::string(config.status().message()).c_str());
    std::exit(1);
  }
  const int longest = a.context + (a.steps + 8) * (draft_k + 1);
  EngineConfig c;
  c.model_dir = a.model;
  c.backend.num_threads = a.threads;
  c.backend.cpu_isa = a.cpu_isa;
  c.kv_cache_dtype = a.kv_cache_dtype;
  // Room for every request's whole sequence (the draft model, the target itself, needs as much).
  const double needed = 1.25 * max_seqs * longest * kv_bytes_per_position(*config, DType::kF32) * (draft_k > 0 ? 2 : 1);
  c.kv_cache_bytes = std::max<std::int64_t>(2LL << 30, static_cast<std::int64_t>(needed));
  c.max_model_len = std::max(2048, longest + 16);
  if (config->max_position_embeddings > 0) c.max_model_len = std::min(c.max_model_len, config->max_position_embeddings);
  c.scheduler.max_num_batched_tokens = std::max(2048, a.prefill_tokens);
  c.scheduler.max_num_seqs = max_seqs;
  if (draft_k > 0) {
    SpeculativeConfig spec;
    spec.method = SpecMethod::kDraftModel;
    spec.model = a.model;
    spec.num_speculative_tokens = draft_k;
    c.speculative = spec;
  }
  auto e = Engine::create(c);
  if (!e.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", std::string(e.status().message()).c_str());
    std::exit(1);
  }
  return std::move(*e);
}

std::vector<std::int32_t> random_prompt(int n, std::int32_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  for (auto& t : p) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
  return p;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  using namespace baton;
  using namespace baton::bench;
  using Clock = std::chrono::steady_clock;
  (void)init_logging("warn");
  Args args = parse(argc, argv);
  if (args.verify_k > 0 && ModelConfig::load(args.model).value().num_recurrent_layers() > 0) {
    args.verify_k = 0;  // the verify line drafts with the model itself, and no draft model keeps recurrent state
  }
  StepProfile::enable(args.profile);
  const int max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  auto engine = make_engine(args, max_batch);
  const std::int64_t weight_bytes = engine->model().weights().bytes_per_decode_step();
  // The floor reads exactly the weights' bytes at the best bandwidth seen for that buffer size,
  // probed before and after the decode runs (the machine is shared; its speed drifts).
  cpu::ThreadPool probe_pool(args.threads);
  ReadProbe probe(probe_pool, static_cast<std::size_t>(weight_bytes));
  BandwidthResult bw = probe.measure(9);
  const std::int32_t vocab = engine->model_config().vocab_size;

  std::vector<nlohmann::json> results;

  // Warm-up, untimed: the largest batch for as many steps as the timed runs, so code, caches and
  // the pool's threads are warm, as in a server that has been running.
  {
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = args.steps + 3;
    for (int i = 0; i < max_batch; ++i) {
      (void)engine->add_request("w" + std::to_string(i), random_prompt(args.context, vocab, 1000u + static_cast<unsigned>(i)), p);
    }
    while (engine->has_unfinished()) {
      if (!engine->step().ok()) return 1;
    }
  }

  // Timed steps of one run: wall time, target forward time, and the profile.
  struct Run {
    std::vector<double> step_s, forward_s;
    ProfileSum prof;
  };
  // Decode: B requests with short prompts, all prefilled in the first step; time each later step.
  // On the plain engine, or on `on` (the verifying engine) with speculation off for these requests.
  auto run_decode = [&](int batch, int round, Run& into, Engine* on = nullptr) -> std::vector<double> {
    Engine& e = on != nullptr ? *on : *engine;
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = args.steps + 3;
    if (on != nullptr) p.max_speculative_tokens = 0;
    for (int i = 0; i < batch; ++i) {
      (void)e.add_request("d" + std::to_string(batch) + "-" + std::to_string(round) + "-" + std::to_string(i),
                                random_prompt(args.context, vocab, static_cast<std::uint32_t>(i)), p);
    }
    std::vector<double> forward_s;
    int full_steps = 0;  // steps in which every request got a token
    while (e.has_unfinished()) {
      StepProfile::reset();
      const double fwd0 = e.stats().forward_seconds;
      const auto t0 = Clock::now();
      auto outs = e.step();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!outs.ok()) std::exit(1);
      // The first such step finishes the prefill, the next two warm up; the rest are pure decode
      // steps of `batch` tokens.
      if (static_cast<int>(outs->size()) == batch && ++full_steps > 3) {
        into.step_s.push_back(s);
        forward_s.push_back(e.stats().forward_seconds - fwd0);
        into.prof.add(StepProfile::totals(), s);
      }
    }
    into.forward_s.insert(into.forward_s.end(), forward_s.begin(), forward_s.end());
    return forward_s;
  };

  // Verification: batch 1, the model drafting for itself, K + 1 tokens verified per step.
  std::unique_ptr<Engine> spec_engine;
  auto run_verify = [&](int round, Run& into) -> std::vector<double> {
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = (args.steps + 3) * (args.verify_k + 1);
    (void)spec_engine->add_request("v" + std::to_string(round), random_prompt(args.context, vocab, 0u), p);
    std::vector<double> forward_s;
    int full_steps = 0;  // steps that accepted every draft; the first two warm up
    while (spec_engine->has_unfinished()) {
      StepProfile::reset();
      const double fwd0 = spec_engine->stats().forward_seconds;
      const auto t0 = Clock::now();
      auto outs = spec_engine->step();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!outs.ok()) std::exit(1);
      std::int64_t n = 0;
      for (const RequestOutput& o : *outs) n += static_cast<std::int64_t>(o.new_tokens.size());
      if (n == args.verify_k + 1 && ++full_steps > 2) {
        into.step_s.push_back(s);
        forward_s.push_back(spec_engine->stats().forward_seconds - fwd0);
        into.prof.add(StepProfile::totals(), s);
      }
    }
    into.forward_s.insert(into.forward_s.end(), forward_s.begin(), forward_s.end());
    return forward_s;
  };
  if (args.verify_k > 0) {
    spec_engine = make_engine(args, 1, args.verify_k);
    Run unused;
    (void)run_verify(-1, unused);  // untimed, as the decode warm-up
  }

  // Rounds: every batch size, then the verification, in turn, so that each round's ratios compare
  // runs made within a few seconds of each other (the machine's speed drifts over a run).
  std::map<int, Run> decode_runs;
  Run verify_run;
  std::map<int, std::vector<double>> throughput_ratios;  // batch -> per-round B * t1 / tB
  std::vector<double> verify_ratios;                      // per-round verify forward / decode forward (same engine)
  std::vector<double> verify_ratios_plain;                // ... / the plain engine's decode forward
  std::vector<double> floor_fractions;                    // per-round batch-1 floor (probed around it) / step
  for (int round = 0; round < args.rounds; ++round) {
    std::map<int, double> step_median;
    double decode_forward = 0;
    for (int batch : args.batches) {
      const std::size_t before = decode_runs[batch].step_s.size();
      // Batch 1 is bracketed by probes: its floor uses the faster memory either side of it.
      const BandwidthResult probe_before = batch == 1 ? probe.measure(3) : BandwidthResult{};
      const std::vector<double> fwd = run_decode(batch, round, decode_runs[batch]);
      const BandwidthResult probe_after = batch == 1 ? probe.measure(3) : BandwidthResult{};
      const std::vector<double> steps(decode_runs[batch].step_s.begin() + static_cast<std::ptrdiff_t>(before),
                                      decode_runs[batch].step_s.end());
      if (steps.empty()) continue;
      step_median[batch] = median(steps);
      if (batch == 1) {
        decode_forward = median(fwd);
        const double bw_near = std::max(probe_before.best_bytes_per_second, probe_after.best_bytes_per_second);
        floor_fractions.push_back(static_cast<double>(weight_bytes) / bw_near / step_median[1]);
      }
    }
    if (step_median.contains(1)) {
      for (const auto& [batch, t] : step_median) {
        if (batch > 1) throughput_ratios[batch].push_back(batch * step_median[1] / t);
      }
    }
    if (spec_engine) {
      const std::vector<double> fwd = run_verify(round, verify_run);
      // Batch-1 decode forwards on the verifying engine itself (run_decode's requests there have
      // speculation off): the same weights. Two engines' weights are separate copies, and on a VM
      // their memory can differ in speed by a quarter, so the verification is compared with these.
      Run on_spec;
      const std::vector<double> fwd1 = run_decode(1, round, on_spec, spec_engine.get());
      if (!fwd.empty() && !fwd1.empty()) verify_ratios.push_back(median(fwd) / median(fwd1));
      if (!fwd.empty() && decode_forward > 0) verify_ratios_plain.push_back(median(fwd) / decode_forward);
    }
  }
  for (int batch : args.batches) {
    const Run& r = decode_runs[batch];
    if (r.step_s.empty()) continue;
    const double med = median(r.step_s);
    nlohmann::json j;
    j["phase"] = "decode";
    j["batch"] = batch;
    j["steps_timed"] = r.step_s.size();
    j["step_seconds_median"] = med;
    j["tokens_per_s"] = batch / med;
    j["forward_seconds_median"] = median(r.forward_s);
    if (throughput_ratios.contains(batch)) {
      // The median over rounds of the paired ratio (each round's batch-1 and batch-B medians).
      j["throughput_over_batch1"] = median(throughput_ratios[batch]);
      j["throughput_over_batch1_rounds"] = throughput_ratios[batch];
    }
    if (batch == 1 && !floor_fractions.empty()) {
      // The median over rounds of the batch-1 step against the floor probed right around it.
      j["fraction_of_bandwidth_floor_paired"] = median(floor_fractions);
      j["fraction_of_bandwidth_floor_paired_rounds"] = floor_fractions;
    }
    if (args.profile) j["profile"] = r.prof.to_json();
    results.push_back(j);
  }
  if (spec_engine) {
    nlohmann::json j;
    j["phase"] = "verify";
    j["batch"] = 1;
    j["verified_tokens_per_step"] = args.verify_k + 1;
    j["steps_timed"] = verify_run.step_s.size();
    j["step_seconds_median"] = verify_run.step_s.empty() ? 0.0 : median(verify_run.step_s);
    j["forward_seconds_median"] = verify_run.forward_s.empty() ? 0.0 : median(verify_run.forward_s);
    if (!verify_ratios.empty()) {
      j["forward_over_decode_forward"] = median(verify_ratios);
      j["forward_over_decode_forward_rounds"] = verify_ratios;
    }
    if (!verify_ratios_plain.empty()) {  // needs batch 1 in --batches
      j["forward_over_plain_engine_decode_forward"] = median(verify_ratios_plain);
    }
    if (args.profile) j["profile"] = verify_run.prof.to_json();
    results.push_back(j);
  }

  // Prefill: one prompt of prefill_tokens, computed in one step; median over a few prompts.
  std::vector<double> prefill_s;
  ProfileSum prefill_prof;
  for (int r = 0; r < 3; ++r) {
    StepProfile::reset();
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 1;
    (void)engine->add_request("p" + std::to_string(r), random_prompt(args.prefill_tokens, vocab, 100u + static_cast<unsigned>(r)), p);
    const auto t0 = Clock::now();
    while (engine->has_unfinished()) {
      if (!engine->step().ok()) return 1;
    }
    prefill_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    prefill_prof.add(StepProfile::totals(), prefill_s.back());
  }
  const double med = median(prefill_s);
  const double flops = 2.0 * static_cast<double>(engine->model_config().num_parameters() -
                                                 static_cast<std::int64_t>(vocab) * engine->model_config().hidden_size) *
                       args.prefill_tokens;
  nlohmann::json pj;
  pj["phase"] = "prefill";
  pj["prompt_tokens"] = args.prefill_tokens;
  pj["step_seconds_median"] = med;
  pj["tokens_per_s"] = args.prefill_tokens / med;
  pj["gflop_per_s"] = flops / med / 1e9;
  if (args.profile) pj["profile"] = prefill_prof.to_json();
  const double blas = openblas_layer_gflops(engine->model_config(), args.prefill_tokens, args.threads);
  pj["openblas_sgemm_gflop_per_s"] = blas;
  pj["gflop_per_s_over_openblas"] = flops / med / 1e9 / blas;
  results.push_back(pj);

  const BandwidthResult after = probe.measure(9);
  const double best_bw = std::max(bw.best_bytes_per_second, after.best_bytes_per_second);
  const double floor_step_s = static_cast<double>(weight_bytes) / best_bw;
  // The avx512bf16 tier multiplies BF16 weights with VDPBF16PS, whose peak is its ceiling; every
  // other tier (and F32 weights) runs exact F32 FMAs.
  const bool bf16_dot = args.cpu_isa == "avx512bf16" && engine->model().weights().matrix_dtype() == "BF16";
  const ComputePeak peak = bf16_dot ? measure_bf16_dot_peak(probe_pool, 9) : measure_fma_peak(probe_pool, 9);
  // Matrix flops of a step: every token through the layers (with experts, through the ones it
  // uses), the rows that need logits through the LM head (decode and verification: all; prefill:
  // the last).
  const ModelConfig& mc = engine->model_config();
  const double head_params = static_cast<double>(vocab) * mc.hidden_size;
  const double layer_params =
      static_cast<double>(mc.num_active_parameters()) - head_params * (mc.tie_word_embeddings ? 1.0 : 2.0);
  auto step_flops = [&](double tokens, double logit_rows) {
    return 2.0 * layer_params * tokens + 2.0 * head_params * logit_rows;
  };
  const DType kv_dtype = args.kv_cache_dtype.value_or(engine->model().kv_layout().dtype);
  const double kv_position_bytes = kv_bytes_per_position(mc, kv_dtype);
  double batch1_step_s = 0;
  for (const nlohmann::json& j : results) {
    if (j["phase"] == "decode" && j["batch"] == 1) batch1_step_s = j["step_seconds_median"].get<double>();
  }
  for (nlohmann::json& j : results) {
    const std::string phase = j["phase"];
    const double tokens = phase == "decode"   ? j["batch"].get<double>()
                          : phase == "verify" ? j["verified_tokens_per_step"].get<double>()
                                              : j["prompt_tokens"].get<double>();
    const double matrix_flops = step_flops(tokens, phase == "prefill" ? 1.0 : tokens);
    // The verify line's step includes its drafting; its target forward is what the floors bound.
    const double timed_s = phase == "verify" ? j["forward_seconds_median"].get<double>()
                                             : j["step_seconds_median"].get<double>();
    // Cached positions a timed decode or verification step reads, on average: the prompt plus the
    // tokens before the middle timed step (three untimed steps first), for each sequence.
    double kv_bytes = 0;
    if (phase != "prefill") {
      const double per_step = phase == "verify" ? args.verify_k + 1.0 : 1.0;
      const double seqs = phase == "verify" ? 1.0 : j["batch"].get<double>();
      kv_bytes = seqs * (args.context + per_step * (3.0 + args.steps / 2.0)) * kv_position_bytes;
      // A hybrid's linear-attention layers read each sequence's recurrent state once a step,
      // whatever the context.
      kv_bytes += seqs * static_cast<double>(recurrent_state_layout(mc, 1).bytes_per_group());
    }
    if (peak.best_flops_per_second > 0) {
      const double compute_floor_s = matrix_flops / peak.best_flops_per_second;
      const double roofline_s = std::max(compute_floor_s, floor_step_s);
      j["compute_peak_gflop_per_s"] = peak.best_flops_per_second / 1e9;
      j["compute_peak_instruction"] = bf16_dot ? "vdpbf16ps" : "fma";
      j["compute_floor_step_seconds"] = compute_floor_s;
      j["roofline_step_seconds"] = roofline_s;
      j["fraction_of_roofline"] = roofline_s / timed_s;
      // Attention reads the cache between a layer's GEMMs, not during them: its bytes add to the
      // roofline (at the best bandwidth) rather than overlap it. At a batch's short contexts the
      // cache is still a large part of what a step reads (about a third of the weights' bytes
      // at batch 32 of the 110M model).
      const double roofline_kv_s = roofline_s + kv_bytes / best_bw;
      if (phase != "prefill") j["roofline_with_kv_step_seconds"] = roofline_kv_s;
      if (phase == "decode" && tokens > 1 && batch1_step_s > 0) {
        j["roofline_throughput_over_batch1"] = tokens * batch1_step_s / roofline_s;
        j["roofline_with_kv_throughput_over_batch1"] = tokens * batch1_step_s / roofline_kv_s;
      }
    }
    j["model"] = args.model;
    j["weights_dtype"] = engine->model().weights().matrix_dtype();
    j["parameters"] = engine->model_config().num_parameters();
    j["weight_bytes_per_step"] = weight_bytes;
    j["read_bandwidth_gb_s"] = best_bw / 1e9;
    j["read_bandwidth_median_gb_s"] = std::max(bw.bytes_per_second, after.bytes_per_second) / 1e9;
    j["floor_step_seconds"] = floor_step_s;
    // For prefill this is far below 1 by nature: prefill is bound by compute, not by reading weights.
    j["fraction_of_bandwidth_floor"] = floor_step_s / j["step_seconds_median"].get<double>();
    j["context"] = args.context;
    j["kv_cache_dtype"] = std::string(dtype_name(kv_dtype));
    if (mc.num_recurrent_layers() > 0) {
      // What one request keeps beside its KV in each of its 1 + k slots: the state after one
      // position, every linear-attention layer (what a hand-off moves).
      j["recurrent_state_bytes_per_slot"] = recurrent_state_layout(mc, 1).bytes_per_group();

    }
    if (phase != "prefill") {
      j["kv_bytes_per_step"] = kv_bytes;
      j["fraction_of_bandwidth_floor_with_kv"] = (static_cast<double>(weight_bytes) + kv_bytes) / best_bw / timed_s;
    }
    j["backend"] = engine->describe();
    j["cpu_isa"] = args.cpu_isa;
    std::cout << j.dump() << std::endl;
  }
  return 0;
}
