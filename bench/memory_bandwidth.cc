#include "bench/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace baton::bench {
namespace {

// Sums a slice with independent accumulators so the loop is bound by loads, not by add latency,
// and prefetches ahead like the GEMV kernels do, so the probe is as fast as a read can be.
__attribute__((target("avx512f"))) float sum_avx512(const float* p, std::size_t n) {
  __m512 acc[8];
  for (auto& a : acc) a = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __builtin_prefetch(p + i + 1024);
    __builtin_prefetch(p + i + 1024 + 64);
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_loadu_ps(p + i + 16 * j));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  float s = _mm512_reduce_add_ps(acc[0]);
  for (; i < n; ++i) s += p[i];
  return s;
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, std::size_t n) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(p + i + 8 * j));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float t[8];
  _mm256_store_ps(t, acc[0]);
  float s = 0;
  for (float x : t) s += x;
  for (; i < n; ++i) s += p[i];
  return s;
}

float sum_slice(const float* p, std::size_t n) {
  if (__builtin_cpu_supports("avx512f")) return sum_avx512(p, n);
  if (__builtin_cpu_supports("avx2")) return sum_avx2(p, n);
  float s = 0;
  for (std::size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

HugePageFloats::HugePageFloats(std::size_t n) : n_(n) {
  const std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(float);
  p_.reset(static_cast<float*>(cpu::allocate_host(bytes)));  // the engine's own allocation
  if (!p_) throw std::bad_alloc();
  std::memset(p_.get(), 0, bytes);
}

ReadProbe::ReadProbe(cpu::ThreadPool& pool, std::size_t buffer_bytes)
    : pool_(pool), buffer_(buffer_bytes / sizeof(float)), bytes_(buffer_bytes) {
  const auto n = static_cast<std::int64_t>(buffer_.size());
  pool_.parallel_for(n, 1 << 16, 16, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) buffer_[static_cast<std::size_t>(i)] = static_cast<float>(i & 7);
  });
}

BandwidthResult ReadProbe::measure(int repetitions) {
  const auto n = static_cast<std::int64_t>(buffer_.size());
  std::vector<double> rates;
  std::atomic<float> sink{0};
  for (int r = 0; r < repetitions + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.parallel_for(n, 1 << 16, 16, [&](std::int64_t b, std::int64_t e) {
      sink.store(sum_slice(buffer_.data() + b, static_cast<std::size_t>(e - b)), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(static_cast<double>(bytes_) / s);  // the first pass warms up
  }
  std::sort(rates.begin(), rates.end());
  return {rates[rates.size() / 2], rates.back(), bytes_};
}

}  // namespace baton::bench
