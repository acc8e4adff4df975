// gemm_bench: the CPU backend's linear() alone, over every matrix one decode step of a model
// multiplies (each layer's qkv, o_proj, gate_up and down, then lm_head), with random weights
// packed as the engine packs them at load. For each row count (a decode batch, k + 1 verification
// tokens, a prefill chunk) it times the whole chain, back to back as a forward runs them, and
// prints one JSON line: the median chain time, GFLOP/s and its fraction of this machine's
// measured peak (F32 FMA, or VDPBF16PS on the avx512bf16 tier), and the weight bytes over the
// time against the read bandwidth probed in the same run.
//
// A decode step's figures in decode_bench mix the GEMMs with attention, norms and the engine;
// this isolates the GEMM's loop nest, blocking and prefetching, which are tuned on it. Weights
// come from --model's config.json only (no checkpoint is read).
//
// usage: gemm_bench --model DIR [--rows 1,8,32,512] [--reps 20] [--threads N] [--cpu-isa ISA]
//                   [--dtype bfloat16|float32] [--layers N]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/compute_peak.h"
#include "bench/memory_bandwidth.h"
#include "engine/model/config.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dtype.h"

namespace {

using baton::DType;

struct Args {
  std::string model;
  std::vector<std::int64_t> rows{1, 8, 32, 512};
  int reps = 20;
  int threads = 0;
  int layers = -1;  // -1: the config's
  std::string cpu_isa = "auto";
  DType dtype = DType::kBF16;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "gemm_bench: %s\nusage: gemm_bench --model DIR [--rows 1,8,32,512] [--reps 20] [--threads N] "
               "[--cpu-isa ISA] [--dtype bfloat16|float32] [--layers N]\n",
               why);
  std::exit(2);
}

[[noreturn]] void die(const absl::Status& status) {
  std::fprintf(stderr, "gemm_bench: %s\n", std::string(status.message()).c_str());
  std::exit(1);
}

int to_int(const std::string& flag, const std::string& v) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < 0) usage((flag + " wants a non-negative integer").c_str());
  return n;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage((k + " needs a value").c_str());
    const std::string v = argv[i + 1];
    if (k == "--model") {
      a.model = v;
    } else if (k == "--rows") {
      a.rows.clear();
      for (absl::string_view r : absl::StrSplit(v, ',')) {
        const int n = to_int(k, std::string(r));
        if (n == 0) usage("--rows: every count must be at least 1");
        a.rows.push_back(n);
      }
    } else if (k == "--reps") {
      a.reps = std::max(1, to_int(k, v));
    } else if (k == "--threads") {
      a.threads = to_int(k, v);
    } else if (k == "--layers") {
      a.layers = to_int(k, v);
    } else if (k == "--cpu-isa") {
      a.cpu_isa = v;
    } else if (k == "--dtype") {
      if (v != "bfloat16" && v != "float32") usage("--dtype must be bfloat16 or float32");
      a.dtype = v == "bfloat16" ? DType::kBF16 : DType::kF32;
    } else {
      usage(("unknown flag " + k).c_str());
    }
  }
  if (a.model.empty()) usage("--model is required");
  return a;
}

// One step's matrices [n, k] in forward order.
std::vector<std::pair<std::int64_t, std::int64_t>> step_shapes(const baton::ModelConfig& c, int layers) {
  std::vector<std::pair<std::int64_t, std::int64_t>> s;
  for (int l = 0; l < layers; ++l) {
    s.emplace_back(c.q_size() + 2 * c.kv_size(), c.hidden_size);
    s.emplace_back(c.hidden_size, c.q_size());
    s.emplace_back(2 * c.intermediate_size, c.hidden_size);
    s.emplace_back(c.hidden_size, c.intermediate_size);
  }
  s.emplace_back(c.vocab_size, c.hidden_size);
  return s;
}

struct Matrix {
  std::int64_t n = 0, k = 0;
  baton::DeviceBuffer packed_buffer;  // empty when the backend keeps the row-major weight
  baton::DeviceBuffer row_major;      // only then kept
  baton::TensorView view;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  auto config = baton::ModelConfig::load(args.model);
  if (!config.ok()) die(config.status());
  baton::BackendOptions options;
  options.num_threads = args.threads;
  options.cpu_isa = args.cpu_isa;
  auto backend_or = baton::make_backend(options);  // the CPU's (options.device's default)
  if (!backend_or.ok()) die(backend_or.status());
  baton::Backend& backend = **backend_or;
  const int layers = args.layers >= 0 ? args.layers : config->num_layers;

  // Random weights in [-0.05, 0.05), packed as at model load.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::vector<Matrix> matrices;
  std::int64_t weight_bytes = 0, macs_per_row = 0, max_n = 0, max_k = 0;
  for (const auto& [n, k] : step_shapes(*config, layers)) {
    Matrix m;
    m.n = n;
    m.k = k;
    std::vector<float> values(static_cast<std::size_t>(n * k));
    for (float& v : values) v = dist(rng);
    const std::size_t bytes = values.size() * baton::dtype_size(args.dtype);
    auto buf = backend.allocate(bytes);
    if (!buf.ok()) die(buf.status());
    m.row_major = std::move(*buf);
    if (args.dtype == DType::kBF16) {  // the CPU backend's memory is the host's
      auto* out = static_cast<std::uint16_t*>(m.row_major.data());
      for (std::size_t i = 0; i < values.size(); ++i) out[i] = baton::f32_to_bf16(values[i]);
    } else {
      std::memcpy(m.row_major.data(), values.data(), bytes);
    }
    const auto weight = baton::TensorView::contiguous(m.row_major.data(), args.dtype, {n, k}, backend.device());
    auto packed = backend.pack_linear_weight(weight, &m.view);
    if (!packed.ok()) die(packed.status());
    m.packed_buffer = std::move(*packed);
    if (m.packed_buffer.data() == nullptr) {
      m.view = weight;
    } else {
      m.row_major = baton::DeviceBuffer{};  // the engine keeps only the packed copy too
    }
    weight_bytes += static_cast<std::int64_t>(bytes);
    macs_per_row += n * k;
    max_n = std::max(max_n, n);
    max_k = std::max(max_k, k);
    matrices.push_back(std::move(m));
  }

  baton::cpu::ThreadPool probe_pool(args.threads);
  baton::bench::ReadProbe probe(probe_pool, static_cast<std::size_t>(weight_bytes));
  const bool bf16_dot = args.cpu_isa == "avx512bf16" && args.dtype == DType::kBF16;
  const auto peak = bf16_dot ? baton::bench::measure_bf16_dot_peak(probe_pool, 9)
                             : baton::bench::measure_fma_peak(probe_pool, 9);
  const auto bandwidth_before = probe.measure(5);

  std::vector<nlohmann::json> lines;
  for (const std::int64_t rows : args.rows) {
    std::vector<float> x(static_cast<std::size_t>(rows * max_k));
    for (float& v : x) v = dist(rng);
    std::vector<float> y(static_cast<std::size_t>(rows * max_n));
    std::vector<double> seconds;
    for (int r = 0; r < args.reps + 1; ++r) {  // the first pass warms up
      const auto t0 = std::chrono::steady_clock::now();
      for (const Matrix& m : matrices) {
        backend.linear(baton::TensorView::contiguous(x.data(), DType::kF32, {rows, m.k}, backend.device()), m.view,
                       baton::TensorView{}, baton::TensorView::contiguous(y.data(), DType::kF32, {rows, m.n}, backend.device()));
      }
      if (r > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(macs_per_row);
    nlohmann::json j;
    j["rows"] = rows;
    j["seconds_median"] = median;
    j["gflop_per_s"] = flops / median / 1e9;
    j["fraction_of_compute_peak"] = flops / median / peak.best_flops_per_second;
    j["weight_gb_per_s"] = static_cast<double>(weight_bytes) / median / 1e9;
    lines.push_back(std::move(j));
  }
  const auto bandwidth_after = probe.measure(5);
  const double bandwidth = std::max(bandwidth_before.best_bytes_per_second, bandwidth_after.best_bytes_per_second);
  for (nlohmann::json& j : lines) {
    j["model"] = args.model;
    j["layers"] = layers;
    j["weights_dtype"] = baton::dtype_name(args.dtype);
    j["backend"] = backend.describe();
    j["weight_bytes"] = weight_bytes;
    j["compute_peak_gflop_per_s"] = peak.best_flops_per_second / 1e9;
    j["read_bandwidth_gb_s"] = bandwidth / 1e9;
    // The chain's floor: its flops at the peak, or its weight bytes at the bandwidth.
    const double floor = std::max(2.0 * j["rows"].get<double>() * static_cast<double>(macs_per_row) /
                                      peak.best_flops_per_second,
                                  static_cast<double>(weight_bytes) / bandwidth);
    j["fraction_of_roofline"] = floor / j["seconds_median"].get<double>();
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}
