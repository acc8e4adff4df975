// Decode and prefill speed of the engine, as fractions of this machine's memory-bandwidth floor.
//
// A decode step must read every weight matrix once (whatever the batch), so its floor is
// weight bytes / read bandwidth; both are measured here, in the same run, with the same threads.
// Prints one JSON object per configuration on stdout.
//
// usage: decode_bench --model DIR [--batches 1,8,32] [--steps 32] [--prefill-tokens 512] [--threads N]
//                     [--cpu-isa auto|avx2|avx512|avx512bf16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench/memory_bandwidth.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "nlohmann/json.hpp"

namespace baton::bench {
namespace {

struct Args {
  std::string model;
  std::vector<int> batches = {1, 8, 32};
  int steps = 32;
  int prefill_tokens = 512;
  int threads = 0;
  std::string cpu_isa = "auto";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--prefill-tokens") a.prefill_tokens = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--cpu-isa") a.cpu_isa = v;
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
    std::fprintf(stderr, "usage: decode_bench --model DIR [--batches 1,8,32] [--steps N] [--prefill-tokens N]\n");
    std::exit(2);
  }
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<Engine> make_engine(const Args& a, int max_seqs) {
  EngineConfig c;
  c.model_dir = a.model;
  c.backend.num_threads = a.threads;
  c.backend.cpu_isa = a.cpu_isa;
  c.kv_cache_bytes = 2LL << 30;
  c.max_model_len = 2048;
  c.scheduler.max_num_batched_tokens = std::max(2048, a.prefill_tokens);
  c.scheduler.max_num_seqs = max_seqs;
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
  const Args args = parse(argc, argv);
  const int max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  auto engine = make_engine(args, max_batch);
  const std::int64_t weight_bytes = engine->model().weights().bytes_per_decode_step();
  // The floor reads exactly the weights' bytes at the best bandwidth seen for that buffer size,
  // probed before and after the decode runs (the machine is shared; its speed drifts).
  cpu::ThreadPool probe_pool(args.threads);
  BandwidthResult bw = measure_read_bandwidth(probe_pool, static_cast<std::size_t>(weight_bytes), 9);
  const std::int32_t vocab = engine->model_config().vocab_size;

  std::vector<nlohmann::json> results;

  // Decode: B requests with short prompts, all prefilled in the first step; time each later step.
  for (int batch : args.batches) {
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = args.steps + 3;
    for (int i = 0; i < batch; ++i) {
      (void)engine->add_request("d" + std::to_string(batch) + "-" + std::to_string(i),
                                random_prompt(16, vocab, static_cast<std::uint32_t>(i)), p);
    }
    std::vector<double> step_s;
    int step = 0;
    while (engine->has_unfinished()) {
      const auto t0 = Clock::now();
      auto outs = engine->step();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!outs.ok()) return 1;
      // Step 0 prefills, steps 1-2 warm up; the rest are pure decode steps of `batch` tokens.
      if (step >= 3 && static_cast<int>(outs->size()) == batch) step_s.push_back(s);
      ++step;
    }
    const double med = median(step_s);
    nlohmann::json j;
    j["phase"] = "decode";
    j["batch"] = batch;
    j["steps_timed"] = step_s.size();
    j["step_seconds_median"] = med;
    j["tokens_per_s"] = batch / med;
    results.push_back(j);
  }

  // Prefill: one prompt of prefill_tokens, computed in one step; median over a few prompts.
  std::vector<double> prefill_s;
  for (int r = 0; r < 3; ++r) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 1;
    (void)engine->add_request("p" + std::to_string(r), random_prompt(args.prefill_tokens, vocab, 100u + static_cast<unsigned>(r)), p);
    const auto t0 = Clock::now();
    while (engine->has_unfinished()) {
      if (!engine->step().ok()) return 1;
    }
    prefill_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
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
  results.push_back(pj);

  const BandwidthResult after = measure_read_bandwidth(probe_pool, static_cast<std::size_t>(weight_bytes), 9);
  const double best_bw = std::max(bw.best_bytes_per_second, after.best_bytes_per_second);
  const double floor_step_s = static_cast<double>(weight_bytes) / best_bw;
  for (nlohmann::json& j : results) {
    j["model"] = args.model;
    j["weights_dtype"] = engine->model().weights().matrix_dtype();
    j["parameters"] = engine->model_config().num_parameters();
    j["weight_bytes_per_step"] = weight_bytes;
    j["read_bandwidth_gb_s"] = best_bw / 1e9;
    j["read_bandwidth_median_gb_s"] = std::max(bw.bytes_per_second, after.bytes_per_second) / 1e9;
    j["floor_step_seconds"] = floor_step_s;
    // For prefill this is far below 1 by nature: prefill is bound by compute, not by reading weights.
    j["fraction_of_bandwidth_floor"] = floor_step_s / j["step_seconds_median"].get<double>();
    j["backend"] = engine->describe();
    std::cout << j.dump() << std::endl;
  }
  return 0;
}
