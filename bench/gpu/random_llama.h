// The model llama_decode_bench times: Llama-3.1-8B's shape (or, with `small`, a tiny model of the
// same family) with random BF16 weights made where the backend computes — by device_fill.cu's
// kernels on a GPU, by host loops with the same hash on the CPU backend (a plumbing run) — never
// read from the host or the disk on a GPU. Weights are packed for linear() as ModelWeights::load
// packs them. Failures end the bench (bench_failure.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/gpu/bench_failure.h"
#include "bench/gpu/device_fill.cuh"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "nlohmann/json.hpp"

namespace baton::bench {

// Llama-3.1-8B's config.json, less what Baton ignores (--small: a tiny model of the same family).
nlohmann::json llama31_8b_config(int layers, bool small);

// The hash of device_fill.cu, on the host (the CPU plumbing run only).
float host_uniform_pm1(std::uint64_t seed, std::uint64_t i);

// Fills device memory: with device_fill.cu's kernels on the GPU, with host loops on the CPU backend
// (whose memory is host memory).
struct Filler {
  bool gpu = true;

  void bf16_uniform(void* dst, std::size_t n, float scale, std::uint64_t seed) const {
    if (gpu) return check(fill_bf16_uniform(dst, n, scale, seed), "fill weights");
    auto* d = static_cast<std::uint16_t*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(scale * host_uniform_pm1(seed, i));
  }
  void f32_uniform(void* dst, std::size_t n, float scale, std::uint64_t seed) const {
    if (gpu) return check(fill_f32_uniform(static_cast<float*>(dst), n, scale, seed), "fill");
    auto* d = static_cast<float*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = scale * host_uniform_pm1(seed, i);
  }
  void f32_constant(void* dst, std::size_t n, float value) const {
    if (gpu) return check(fill_f32_constant(static_cast<float*>(dst), n, value), "fill");
    std::fill_n(static_cast<float*>(dst), n, value);
  }
  // The fills above run on the legacy default stream; the backend's stream must not start first.
  void sync(const char* what) const {
    if (gpu) check(cudaDeviceSynchronize(), what);
  }
};

// The model's parameters, made on the device.
class RandomWeights {
 public:
  RandomWeights(Backend& backend, const Filler& fill) : backend_(backend), fill_(fill) {}

  TensorView matrix(std::int64_t rows, std::int64_t cols, float scale) {
    DeviceBuffer buf = allocate(static_cast<std::size_t>(rows * cols) * 2);
    fill_.bf16_uniform(buf.data(), static_cast<std::size_t>(rows * cols), scale, next_seed());
    TensorView v = buf.view(DType::kBF16, {rows, cols});
    owned_.push_back(std::move(buf));
    return v;
  }
  // A linear() weight [n, k] with variance 1/k (uniform(-a, a), a = sqrt(3 / k)), packed like
  // WeightLoader::for_linear does.
  TensorView linear(std::int64_t n, std::int64_t k) {
    TensorView w = matrix(n, k, std::sqrt(3.0f / static_cast<float>(k)));
    TensorView packed;
    auto buf = backend_.pack_linear_weight(w, &packed);
    check(buf.status(), "pack_linear_weight");
    if (buf->data() == nullptr) return w;
    owned_.pop_back();  // the unpacked copy
    owned_.push_back(std::move(*buf));
    return packed;
  }
  TensorView ones(std::int64_t n) {
    DeviceBuffer buf = allocate(static_cast<std::size_t>(n) * 4);
    fill_.f32_constant(buf.data(), static_cast<std::size_t>(n), 1.0f);
    TensorView v = buf.view(DType::kF32, {n});
    owned_.push_back(std::move(buf));
    return v;
  }

 private:
  DeviceBuffer allocate(std::size_t bytes) {
    auto buf = backend_.allocate(bytes);
    check(buf.status(), "allocate weights");
    return std::move(*buf);
  }
  std::uint64_t next_seed() { return 0x5eed0000ull + seed_++; }

  Backend& backend_;
  const Filler& fill_;
  std::vector<DeviceBuffer> owned_;
  std::uint64_t seed_ = 0;
};

// ModelWeights of config `c`, every tensor made by `rw` (which must outlive them).
ModelWeights make_weights(const ModelConfig& c, RandomWeights& rw);

}  // namespace baton::bench
