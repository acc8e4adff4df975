#include "bench/openblas_peer.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>
#include <vector>

#include "bench/memory_bandwidth.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"

namespace baton::bench {

double openblas_layer_gflops(const ModelConfig& c, int rows, int threads) {
  const std::int64_t h = c.hidden_size;
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {  // (n, k)
      {c.q_size() + 2LL * c.kv_size(), h}, {h, c.q_size()}, {2LL * c.intermediate_size, h}, {h, c.intermediate_size}};
  cpu::ThreadPool pool(threads);
  cpu::blas_init_single_threaded();
  // Buffers laid out like the engine's (huge pages where the engine gets them): a like-for-like peer.
  std::vector<HugePageFloats> ws, ys;
  std::int64_t max_k = 0;
  for (const auto& [n, k] : shapes) {
    HugePageFloats w(static_cast<std::size_t>(n * k));
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = d(rng);
    ws.push_back(std::move(w));
    ys.emplace_back(static_cast<std::size_t>(rows * n));
    max_k = std::max(max_k, k);
  }
  HugePageFloats x(static_cast<std::size_t>(rows * max_k));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.5f;
  double flops = 0;
  for (const auto& [n, k] : shapes) flops += 2.0 * static_cast<double>(rows) * static_cast<double>(n * k);
  std::vector<double> times;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      cpu::GemmArgs a;
      a.x = x.data();
      a.ldx = shapes[i].second;
      a.w = ws[i].data();
      a.w_dtype = DType::kF32;
      a.ldw = shapes[i].second;
      a.y = ys[i].data();
      a.ldy = shapes[i].first;
      a.rows = rows;
      a.k = shapes[i].second;
      pool.parallel_for(shapes[i].first, 16, 16, [&](std::int64_t b, std::int64_t e) { cpu::blas_gemm_f32(a, b, e); });
    }
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return flops / times[times.size() / 2] / 1e9;
}

}  // namespace baton::bench
