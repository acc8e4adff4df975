#include "bench/compute_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace baton::bench {
namespace {

constexpr int kChains = 12;  // independent accumulators: more than FMA latency x issue width
constexpr std::int64_t kIterations = 1 << 18;

// Flops done: kIterations x kChains x 16 lanes x 2.
__attribute__((target("avx512f"))) float fma_loop_avx512() {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < kIterations; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float t[16];  // (GCC 12's _mm512_reduce_add_ps warns under a target attribute)
  _mm512_store_ps(t, acc[0]);
  return t[0];
}

// Flops done: kIterations x kChains x 2 x 8 lanes x 2 (two ymm per step, as V16 on AVX2).
__attribute__((target("avx2,fma"))) float fma_loop_avx2() {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < 2 * kIterations; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  alignas(32) float t[8];
  _mm256_store_ps(t, acc[0]);
  return t[0];
}

// Flops done: kIterations x kChains x 16 lanes x 4 (two products and two adds per lane).
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_loop() {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, 2^-24
  for (std::int64_t it = 0; it < kIterations; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float t[16];  // (GCC 12's _mm512_reduce_add_ps warns under a target attribute)
  _mm512_store_ps(t, acc[0]);
  return t[0];
}

ComputePeak measure_loop(cpu::ThreadPool& pool, int repetitions, double flops_per_thread, float (*loop)()) {
  std::atomic<float> sink{0};
  std::vector<double> rates;
  for (int r = 0; r < repetitions + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int) { sink.store(loop(), std::memory_order_relaxed); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(flops_per_thread * pool.size() / s);  // the first run warms up
  }
  std::sort(rates.begin(), rates.end());
  return {rates[rates.size() / 2], rates.back()};
}

}  // namespace

ComputePeak measure_fma_peak(cpu::ThreadPool& pool, int repetitions) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx512 && !avx2) return {};
  return measure_loop(pool, repetitions, static_cast<double>(kIterations) * kChains * 16 * 2,
                      avx512 ? &fma_loop_avx512 : &fma_loop_avx2);
}

ComputePeak measure_bf16_dot_peak(cpu::ThreadPool& pool, int repetitions) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) return {};
  return measure_loop(pool, repetitions, static_cast<double>(kIterations) * kChains * 16 * 4, &bf16_dot_loop);
}

}  // namespace baton::bench
