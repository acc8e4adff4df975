// llama_decode_bench: decode speed of the engine's Transformer::forward on the CUDA backend for a
// Llama-3.1-8B-shaped model, against the GPU's own device-to-device copy bandwidth measured in the
// same run. Part of bench/gpu/run_device_checks.sh (step "speed"); bench/gpu/hf_decode_speed.py
// times the same shape in Hugging Face transformers.
//
//   llama_decode_bench [--device cuda:0] [--batches 1,16] [--context 512] [--warmup 5] [--steps 30]
//                      [--copy-gib 2] [--layers 32] [--prefill 1] [--graphs both]
//                      [--kv-cache-dtype float32] [--no-batch-invariant] [--small]
//
// --small swaps in a tiny model of the same family (hidden 256, 2 layers, vocab 1024) and
// --device cpu runs on the CPU backend, its weights filled on the host by the same hash: together a
// plumbing test of this program (run_device_checks.sh --cpu-only), never a measurement.
//
// The model: hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128, intermediate 14336,
// vocab 128256, rope theta 500000 with Llama 3.1's llama3 rope scaling, untied lm_head. Weights
// are RANDOM BF16 made on the GPU by a hash-based fill kernel (device_fill.cu; uniform with
// variance 1/fan_in, norms 1): nothing comes from the host or the disk. ModelWeights is assembled
// directly from those device buffers, each linear() weight put in the backend's packed layout
// when it has one, as ModelWeights::load does (random_llama.h makes the model).
//
// Context: the paged KV cache (F32, the backend's activation dtype, or BF16 with --kv-cache-dtype
// bfloat16) is pre-filled with random values, and every sequence starts decoding at position --context over a block table covering
// it: the attention reads `context` cached positions, exactly as after a prefill. With --prefill 1
// one 'context'-token prefill of a single sequence is timed too (its own warm-up first), with its
// arithmetic rate: prefill_flops counts 2 x (matrix parameters, less lm_head) x tokens, the one
// lm_head row, and causal attention's QK^T and PV (2 x 2 x heads x head_dim x T(T+1)/2 per layer).
// --no-batch-invariant builds the backend with BackendOptions::batch_invariant = false (cuBLAS for
// linear(), as `--no-batch-invariant` on the nodes).
//
// A step: one forward of `batch` sequences with one new token each (logits for each), then
// Backend::synchronize(); timed on the host clock, so launch gaps count as they do in the engine.
// After --warmup steps, --steps steps are timed; the median is reported (min and p90 too).
// --graphs: "on" replays each step from a captured graph (engine/model/forward_graphs.h; the first
// warm-up step captures it), as the engine does on CUDA by default; "off" launches op by op;
// "both" (default) times both over the same weights and cache: "decode" holds the graph runs,
// "decode_eager" the op-by-op ones.
//
// Bandwidth definitions (one convention for both numbers: DRAM bytes moved, read + written, per
// second):
//   copy_bandwidth  = 2 * copy_bytes / median time of cudaMemcpy(device -> device, copy_bytes):
//                     each byte is read once and written once (H200: about 4.3e12, KINDS.md).
//   weight_bandwidth = weight_bytes_per_step / step_time: a decode step reads every weight matrix
//                     (and norm) once whatever the batch (ModelWeights::bytes_per_decode_step();
//                     the embedding row lookup is negligible); its writes are a few KiB.
//   fraction        = weight_bandwidth / copy_bandwidth: 1.0 would be a step that does nothing but
//                     stream its weights at copy speed. fraction_with_kv also counts the KV cache
//                     bytes the attention reads (batch x context x layers x 2 x kv_heads x
//                     head_dim x 4, or x 2 with a BF16 cache), which matter at batch 16.
// Prints one JSON object on stdout (progress on stderr).
//
// Must not: read weights from the host or the disk on the GPU, pass a CPU run for a measurement
// (its JSON says "plumbing_test": true), or report a run whose logits are not finite as fine
// (finite_logits says).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "bench/gpu/bench_failure.h"
#include "bench/gpu/random_llama.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/transformer.h"
#include "kernels/backend_factory.h"
#include "kernels/dtype.h"
#include "nlohmann/json.hpp"

namespace baton::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string device = "cuda";
  std::vector<int> batches = {1, 16};
  int context = 512;
  int warmup = 5;
  int steps = 30;
  double copy_gib = 2.0;
  int layers = 32;
  bool prefill = true;
  std::string graphs = "both";  // on, off, both
  DType kv_cache_dtype = DType::kF32;
  bool small = false;
  bool batch_invariant = true;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--small") {
      a.small = true;
      continue;
    }
    if (k == "--no-batch-invariant") {
      a.batch_invariant = false;
      continue;
    }
    if (i + 1 >= argc) die(str_cat("flag ", k, " needs a value"));
    const std::string v = argv[++i];
    if (k == "--device") {
      a.device = v;
    } else if (k == "--batches") {
      a.batches.clear();
      for (std::size_t pos = 0; pos <= v.size();) {
        const std::size_t comma = std::min(v.find(',', pos), v.size());
        a.batches.push_back(std::stoi(v.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    } else if (k == "--context") {
      a.context = std::stoi(v);
    } else if (k == "--warmup") {
      a.warmup = std::stoi(v);
    } else if (k == "--steps") {
      a.steps = std::stoi(v);
    } else if (k == "--copy-gib") {
      a.copy_gib = std::stod(v);
    } else if (k == "--layers") {
      a.layers = std::stoi(v);
    } else if (k == "--prefill") {
      a.prefill = v != "0";
    } else if (k == "--graphs") {
      if (v != "on" && v != "off" && v != "both") die("--graphs must be on, off or both");
      a.graphs = v;
    } else if (k == "--kv-cache-dtype") {
      if (v != "float32" && v != "bfloat16") die("--kv-cache-dtype must be float32 or bfloat16");
      a.kv_cache_dtype = v == "bfloat16" ? DType::kBF16 : DType::kF32;
    } else {
      die(str_cat("unknown flag ", k));
    }
  }
  if (a.batches.empty() || a.context < 1 || a.steps < 1 || a.warmup < 0 || a.layers < 1) die("bad arguments");
  return a;
}

struct Stats {
  double median = 0, min = 0, p90 = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  s.min = v.front();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.p90 = v[std::min(v.size() - 1, static_cast<std::size_t>(std::ceil(0.9 * static_cast<double>(v.size()))) - 1)];
  return s;
}

// Device-to-device copy bandwidth, read + written bytes per second (median of 10 after 3 warm-ups).
// On the CPU (plumbing run), std::memcpy of the same size timed on the host clock.
json copy_bandwidth(double gib, bool gpu) {
  const auto bytes = static_cast<std::size_t>(gib * static_cast<double>(1ull << 30));
  if (!gpu) {
    std::vector<char> src(bytes, 1), dst(bytes);
    std::vector<double> times;
    for (int i = 0; i < 5; ++i) {
      const auto start = Clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    const Stats s = stats(times);
    return json{{"bytes", bytes}, {"median_s", s.median}, {"min_s", s.min},
                {"read_write_bytes_per_s", 2.0 * static_cast<double>(bytes) / s.median}};
  }
  void *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, bytes), "cudaMalloc copy source");
  check(cudaMalloc(&dst, bytes), "cudaMalloc copy destination");
  check(fill_f32_uniform(static_cast<float*>(src), bytes / 4, 1.0f, 99), "fill copy source");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < 13; ++i) {
    check(cudaEventRecord(start, 0), "cudaEventRecord");
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpy device to device");
    check(cudaEventRecord(stop, 0), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= 3) times.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  const Stats s = stats(times);
  return json{{"bytes", bytes},
              {"median_s", s.median},
              {"min_s", s.min},
              {"read_write_bytes_per_s", 2.0 * static_cast<double>(bytes) / s.median}};
}

bool all_finite(Backend& backend, const TensorView& logits, std::int64_t vocab) {
  std::vector<float> row(static_cast<std::size_t>(vocab));
  backend.copy_to_host(row.data(), logits.data, row.size() * sizeof(float));
  return std::all_of(row.begin(), row.end(), [](float x) { return std::isfinite(x); });
}

// Floating-point operations of one prefill of `tokens` tokens with logits for the last one (see the
// header comment): multiply-adds count 2.
double prefill_flops(const ModelConfig& c, std::int64_t tokens) {
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.q_size()), kv = static_cast<double>(c.kv_size());
  const double per_layer_params = h * q + 2 * h * kv + q * h + 3 * h * static_cast<double>(c.intermediate_size);
  const double t = static_cast<double>(tokens);
  const double linear = 2.0 * per_layer_params * c.num_layers * t + 2.0 * h * static_cast<double>(c.vocab_size);
  const double attention = 2.0 * 2.0 * q * t * (t + 1) / 2.0 * c.num_layers;
  return linear + attention;
}

int run(int argc, char** argv) {
  const Args args = parse(argc, argv);
  check(init_logging("warn"), "init_logging");
  BackendOptions bo;
  auto device = parse_device(args.device);
  check(device.status(), "--device");
  const Filler fill{device->type == DeviceType::kCuda};
  if (!fill.gpu && !args.small) die("--device cpu is a plumbing test: give --small too");
  bo.device = *device;
  bo.batch_invariant = args.batch_invariant;
  auto backend_or = make_backend(bo);
  check(backend_or.status(), "make_backend");
  std::unique_ptr<Backend> backend = std::move(*backend_or);
  if (fill.gpu) check(cudaSetDevice(bo.device.index), "cudaSetDevice");

  const json config_json = llama31_8b_config(args.layers, args.small);
  auto config = ModelConfig::parse(config_json, nullptr, "llama_decode_bench's model");
  check(config.status(), "ModelConfig::parse");

  const int max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  const int total_steps = args.warmup + args.steps;
  const std::int32_t block_size = 16;
  const std::int32_t seq_len = args.context + total_steps + 1;
  const std::int32_t blocks_per_seq = BlockTable::blocks_for(seq_len, block_size);

  auto t0 = Clock::now();
  RandomWeights rw(*backend, fill);  // outlives the model, which only views its buffers
  ModelWeights weights = make_weights(*config, rw);
  fill.sync("weight fill");
  const double weights_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::int64_t weight_bytes = weights.bytes_per_decode_step();
  std::fprintf(stderr, "llama_decode_bench: %.2f GB of weights made on the device in %.2f s (%s)\n",
               static_cast<double>(weight_bytes) / 1e9, weights_s, weights.matrix_dtype().c_str());

  TransformerOptions to;
  to.max_num_tokens = std::max({args.context, max_batch, 16});
  to.max_num_seqs = max_batch;
  to.max_num_logits = max_batch;
  to.max_model_len = blocks_per_seq * block_size;
  to.block_size = block_size;
  // Two models over the same weight buffers: one op by op, one replaying graphs.
  ModelWeights graph_weights;
  graph_weights.embed = weights.embed;
  graph_weights.final_norm = weights.final_norm;
  graph_weights.lm_head = weights.lm_head;
  graph_weights.layers = weights.layers;
  auto model_or = Transformer::create(*backend, *config, std::move(weights), to);
  check(model_or.status(), "Transformer::create");
  std::unique_ptr<Transformer> model = std::move(*model_or);
  TransformerOptions graph_to = to;
  graph_to.graph_max_seqs = max_batch;
  auto graph_model_or = Transformer::create(*backend, *config, std::move(graph_weights), graph_to);
  check(graph_model_or.status(), "Transformer::create (graphs)");
  std::unique_ptr<Transformer> graph_model = std::move(*graph_model_or);

  const std::int32_t num_blocks = max_batch * blocks_per_seq + 1;
  KvCacheLayout layout = model->kv_layout();
  layout.dtype = args.kv_cache_dtype;
  auto cache_or = KvCache::create(*backend, layout, num_blocks);
  check(cache_or.status(), "KvCache::create");
  KvCache cache = std::move(*cache_or);
  const KvRegion region = cache.region();
  const auto fill_kv = [&] {
    if (layout.dtype == DType::kBF16) {
      fill.bf16_uniform(region.base, region.bytes / 2, 1.0f, 7);
    } else {
      fill.f32_uniform(region.base, region.bytes / 4, 1.0f, 7);
    }
    fill.sync("KV fill");
  };
  fill_kv();
  // Bytes of K and V for one cached position, all layers.
  const double kv_bytes_per_position = 2.0 * layout.num_layers * layout.num_kv_heads * layout.head_dim *
                                       static_cast<double>(dtype_size(layout.dtype));

  json out;
  out["bench"] = "llama_decode_bench";
  out["model"] = args.small ? "tiny Llama (--small), random BF16 weights"
                             : "Llama-3.1-8B shape, random BF16 weights made on the device";
  out["plumbing_test"] = !fill.gpu || args.small;
  out["config"] = config_json;
  out["backend"] = backend->describe();
  out["batch_invariant"] = args.batch_invariant;
  out["weight_bytes_per_step"] = weight_bytes;
  out["weight_dtype"] = model->weights().matrix_dtype();
  out["kv_cache"] = {{"dtype", std::string(dtype_name(layout.dtype))}, {"blocks", num_blocks}, {"bytes", region.bytes}};
  out["weights_made_s"] = weights_s;

  std::fprintf(stderr, "llama_decode_bench: device-to-device copy, %.1f GiB\n", args.copy_gib);
  out["copy"] = copy_bandwidth(args.copy_gib, fill.gpu);
  const double copy_bw = out["copy"]["read_write_bytes_per_s"].get<double>();
  out["bandwidth_definition"] =
      "copy: (read + written bytes) / time of a device-to-device cudaMemcpy; decode: weight bytes read per step / "
      "step time (writes are negligible); fraction = decode / copy";

  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::int32_t> token(0, config->vocab_size - 1);

  if (args.prefill) {
    // One sequence's prompt of `context` tokens, logits for the last one; a warm-up run first.
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(args.context));
    for (auto& t : prompt) t = token(rng);
    std::vector<double> times;
    bool finite = true;
    for (int rep = 0; rep < 3; ++rep) {
      KvBlockPool pool(num_blocks, block_size);
      BlockTable table(block_size);
      BATON_CHECK(table.grow_to(pool, args.context), "out of KV blocks");
      const std::int32_t last = args.context - 1;
      ForwardSequence s;
      s.tokens = prompt;
      s.start_position = 0;
      s.block_table = table.blocks();
      s.logits_indices = std::span<const std::int32_t>(&last, 1);
      ForwardBatch batch;
      batch.sequences.push_back(s);
      const auto start = Clock::now();
      auto fwd = model->forward(batch, cache);
      check(fwd.status(), "prefill forward");
      backend->synchronize();
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      if (rep == 0) finite = all_finite(*backend, fwd->logits, config->vocab_size);
    }
    times.erase(times.begin());
    const Stats s = stats(times);
    const double flops = prefill_flops(*config, args.context);
    out["prefill"] = {{"tokens", args.context},
                      {"median_s", s.median},
                      {"tokens_per_s", args.context / s.median},
                      {"flops", flops},
                      {"flops_per_s", flops / s.median},
                      {"finite_logits", finite}};
    std::fprintf(stderr, "llama_decode_bench: prefill %d tokens: %.2f ms, %.1f TFLOP/s\n", args.context,
                 s.median * 1e3, flops / s.median / 1e12);
    // Re-randomize the KV the prefill overwrote (not needed for timing; keeps the data uniform).
    fill_kv();
  }

  auto time_decode = [&](Transformer& m, const int batch_size, const bool graphs) {
    KvBlockPool pool(num_blocks, block_size);
    std::vector<BlockTable> tables;
    std::vector<std::vector<std::int32_t>> tokens(static_cast<std::size_t>(batch_size));
    for (int b = 0; b < batch_size; ++b) {
      tables.emplace_back(block_size);
      BATON_CHECK(tables.back().grow_to(pool, seq_len), "out of KV blocks");
      tokens[static_cast<std::size_t>(b)].resize(static_cast<std::size_t>(total_steps));
      for (auto& t : tokens[static_cast<std::size_t>(b)]) t = token(rng);
    }
    const std::int32_t zero = 0;
    std::vector<double> times;
    double kv_bytes_sum = 0;
    bool finite = true;
    const std::int64_t replays_before = m.graph_stats().replays;
    for (int step = 0; step < total_steps; ++step) {
      ForwardBatch batch;
      for (int b = 0; b < batch_size; ++b) {
        ForwardSequence s;
        s.tokens = std::span<const std::int32_t>(tokens[static_cast<std::size_t>(b)]).subspan(static_cast<std::size_t>(step), 1);
        s.start_position = args.context + step;
        s.block_table = tables[static_cast<std::size_t>(b)].blocks();
        s.logits_indices = std::span<const std::int32_t>(&zero, 1);
        batch.sequences.push_back(s);
      }
      const auto start = Clock::now();
      auto fwd = m.forward(batch, cache);
      check(fwd.status(), "decode forward");
      backend->synchronize();
      const double dt = std::chrono::duration<double>(Clock::now() - start).count();
      if (step >= args.warmup) {
        times.push_back(dt);
        kv_bytes_sum += batch_size * (args.context + step + 1) * kv_bytes_per_position;
      }
      if (step == total_steps - 1) finite = all_finite(*backend, fwd->logits, config->vocab_size);
    }
    const Stats s = stats(times);
    const double kv_bytes = kv_bytes_sum / static_cast<double>(times.size());
    const double weight_bw = static_cast<double>(weight_bytes) / s.median;
    json d{{"batch", batch_size},
           {"context", args.context},
           {"graphs", graphs},
           {"graph_replays", m.graph_stats().replays - replays_before},
           {"warmup_steps", args.warmup},
           {"timed_steps", args.steps},
           {"step_ms_median", s.median * 1e3},
           {"step_ms_min", s.min * 1e3},
           {"step_ms_p90", s.p90 * 1e3},
           {"tokens_per_s", batch_size / s.median},
           {"weight_bytes_per_s", weight_bw},
           {"fraction_of_copy_bandwidth", weight_bw / copy_bw},
           {"kv_bytes_per_step", kv_bytes},
           {"fraction_with_kv", (static_cast<double>(weight_bytes) + kv_bytes) / s.median / copy_bw},
           {"finite_logits", finite}};
    std::fprintf(stderr, "llama_decode_bench: batch %d%s: %.3f ms/step, %.1f tokens/s, %.2f of copy bandwidth\n",
                 batch_size, graphs ? " (graphs)" : "", s.median * 1e3, batch_size / s.median, weight_bw / copy_bw);
    return d;
  };

  json decode = json::array(), decode_eager = json::array();
  for (const int batch_size : args.batches) {
    if (args.graphs != "off") decode.push_back(time_decode(*graph_model, batch_size, true));
    if (args.graphs != "on") (args.graphs == "off" ? decode : decode_eager).push_back(time_decode(*model, batch_size, false));
  }
  if (args.graphs == "both") out["decode_eager"] = decode_eager;
  out["decode"] = decode;
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) { return baton::bench::run(argc, argv); }
