// cuda_gemm_bench: the batch-invariant linear() (kernels/cuda/gemm.cuh) on Llama-3.1-8B's weight
// shapes with BF16 weights, at m = 1 (decode), 5 and 16 (speculative verification), against the
// device's own copy bandwidth measured in the same run. The decode goal: weights streamed at
// >= 80% of the device-to-device copy bandwidth.
//
// Output, one JSON object per line:
//   {"copy_GBps":..}                                       cudaMemcpyAsync D2D of 1 GiB, (read + written bytes) / time
//   {"shape":"qkv","n":..,"k":..,"m":..,"us":..,"weight_GBps":..,"fraction_of_copy_bw":..}   per case
//   {"summary":"llama3.1-8b decode step","m":..,"us":..,"weight_GBps":..,"fraction_of_copy_bw":..}
//     (32 layers of qkv, o_proj, gate_up, down plus lm_head, from the per-shape medians)
// us: median over --runs samples (default 25) of the mean time of one call in a sample; a sample is
// `copies` back-to-back calls on distinct weight copies (at least 512 MiB of them, so nothing is
// L2-resident from the previous call), timed with CUDA events after a warm-up.
// weight_GBps = n * k * 2 bytes / us (activation and output bytes are < 0.1% and not counted).
//
// Must not: run on the CPU or need a model; fill weights from the host (a kernel fills them).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.cuh"

namespace {

#define BENCH_CHECK(expr)                                                                              \
  do {                                                                                                 \
    const cudaError_t err_ = (expr);                                                                   \
    if (err_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_));    \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

__device__ std::uint32_t hash32(std::uint64_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) ^ (static_cast<std::uint32_t>(i >> 32) * 0x9e3779b9u) ^ seed;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

// Uniform in [-scale, scale).
__device__ float uniform(std::uint64_t i, std::uint32_t seed, float scale) {
  return (static_cast<float>(hash32(i, seed) >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale;
}

__global__ void fill_bf16(__nv_bfloat16* p, std::size_t count, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16_rn(uniform(i, seed, 0.05f));
  }
}

__global__ void fill_f32(float* p, std::size_t count, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = uniform(i, seed, 1.0f);
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5f * (v[h - 1] + v[h]);
}

// Device-to-device copy bandwidth: (bytes read + bytes written) / time, GB/s.
double copy_bandwidth_GBps(cudaStream_t stream, int runs) {
  const std::size_t bytes = std::size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  BENCH_CHECK(cudaMalloc(&src, bytes));
  BENCH_CHECK(cudaMalloc(&dst, bytes));
  fill_f32<<<1024, 256, 0, stream>>>(static_cast<float*>(src), bytes / 4, 1);
  BENCH_CHECK(cudaGetLastError());
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  std::vector<float> ms;
  for (int i = 0; i < runs; ++i) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  BENCH_CHECK(cudaFree(src));
  BENCH_CHECK(cudaFree(dst));
  return 2.0 * static_cast<double>(bytes) / (static_cast<double>(median(ms)) * 1e-3) / 1e9;
}

struct Shape {
  const char* name;
  std::int64_t n, k;
  int per_step;  // times a decode step runs it (32 layers, or once for lm_head)
};

}  // namespace

int main(int argc, char** argv) {
  int runs = 25;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(20, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--runs N (>= 20, default 25)]\n", argv[0]);
      return 2;
    }
  }
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::string error;
  baton::cuda::GemmContext* ctx = baton::cuda::gemm_create(stream, /*with_cublas=*/false, &error);
  if (ctx == nullptr) {
    std::fprintf(stderr, "gemm_create: %s\n", error.c_str());
    return 1;
  }

  const double copy_GBps = copy_bandwidth_GBps(stream, runs);
  std::printf("{\"copy_GBps\":%.1f}\n", copy_GBps);
  std::fflush(stdout);

  const Shape shapes[] = {{"qkv", 6144, 4096, 32},
                          {"o_proj", 4096, 4096, 32},
                          {"gate_up", 28672, 4096, 32},
                          {"down", 4096, 14336, 32},
                          {"lm_head", 128256, 4096, 1}};
  const int row_counts[] = {1, 5, 16};
  constexpr int kMaxRows = 16;
  double step_us[3] = {0, 0, 0}, step_bytes = 0;

  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (const Shape& s : shapes) {
    const std::size_t weight_elems = static_cast<std::size_t>(s.n * s.k);
    const std::size_t weight_bytes = weight_elems * 2;
    const std::size_t min_total = std::size_t{512} << 20;
    const int copies = static_cast<int>(std::max<std::size_t>(1, (min_total + weight_bytes - 1) / weight_bytes));
    __nv_bfloat16* w = nullptr;
    float *x = nullptr, *y = nullptr;
    BENCH_CHECK(cudaMalloc(&w, weight_bytes * copies));
    BENCH_CHECK(cudaMalloc(&x, static_cast<std::size_t>(kMaxRows * s.k) * 4));
    BENCH_CHECK(cudaMalloc(&y, static_cast<std::size_t>(kMaxRows * s.n) * 4));
    fill_bf16<<<4096, 256, 0, stream>>>(w, weight_elems * copies, 7);
    fill_f32<<<256, 256, 0, stream>>>(x, static_cast<std::size_t>(kMaxRows * s.k), 9);
    BENCH_CHECK(cudaGetLastError());
    step_bytes += static_cast<double>(weight_bytes) * s.per_step;

    for (int mi = 0; mi < 3; ++mi) {
      const int m = row_counts[mi];
      baton::cuda::LinearArgs a;
      a.x = x;
      a.ldx = s.k;
      a.w_type = baton::cuda::WeightType::kBF16;
      a.ldw = s.k;
      a.y = y;
      a.ldy = s.n;
      a.m = m;
      a.n = s.n;
      a.k = s.k;
      auto call = [&](int copy) {
        a.w = w + static_cast<std::size_t>(copy) * weight_elems;
        BENCH_CHECK(baton::cuda::linear(ctx, a, /*batch_invariant=*/true, stream));
      };
      for (int i = 0; i < std::max(3, copies); ++i) call(i % copies);  // warm-up
      std::vector<float> per_call_ms;
      for (int r = 0; r < runs; ++r) {
        BENCH_CHECK(cudaEventRecord(start, stream));
        for (int c = 0; c < copies; ++c) call(c);
        BENCH_CHECK(cudaEventRecord(stop, stream));
        BENCH_CHECK(cudaEventSynchronize(stop));
        float t = 0;
        BENCH_CHECK(cudaEventElapsedTime(&t, start, stop));
        per_call_ms.push_back(t / static_cast<float>(copies));
      }
      const double us = static_cast<double>(median(per_call_ms)) * 1e3;
      const double GBps = static_cast<double>(weight_bytes) / (us * 1e-6) / 1e9;
      step_us[mi] += us * s.per_step;
      std::printf("{\"shape\":\"%s\",\"n\":%lld,\"k\":%lld,\"m\":%d,\"us\":%.2f,\"weight_GBps\":%.1f,"
                  "\"fraction_of_copy_bw\":%.3f}\n",
                  s.name, static_cast<long long>(s.n), static_cast<long long>(s.k), m, us, GBps, GBps / copy_GBps);
      std::fflush(stdout);
    }
    BENCH_CHECK(cudaFree(w));
    BENCH_CHECK(cudaFree(x));
    BENCH_CHECK(cudaFree(y));
  }
  for (int mi = 0; mi < 3; ++mi) {
    const double GBps = step_bytes / (step_us[mi] * 1e-6) / 1e9;
    std::printf("{\"summary\":\"llama3.1-8b decode step\",\"m\":%d,\"us\":%.1f,\"weight_GBps\":%.1f,"
                "\"fraction_of_copy_bw\":%.3f}\n",
                row_counts[mi], step_us[mi], GBps, GBps / copy_GBps);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  baton::cuda::gemm_destroy(ctx);
  BENCH_CHECK(cudaStreamDestroy(stream));
  return 0;
}
