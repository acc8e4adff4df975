// Helpers for the CUDA kernel tests: each test runs an op on the CUDA backend and on its CPU twin
// with the same inputs and compares. Host arrays go up with Twin::upload and come back with
// Twin::download; a test calls SKIP_WITHOUT_GPU() first, so the suite passes (skipped) on machines
// without a GPU and CI only compiles it.
//
// BATON_TWIN_ON_CPU=1 runs the tests without a GPU with a second CPU backend in the GPU's place: the
// comparisons then hold trivially, but every test's plumbing (uploads, views, dtypes, the host-side
// reference) runs, so a broken test shows up before GPU time is spent on it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/cpu/test_util.h"

namespace baton::cuda_testing {

inline bool twin_on_cpu() {
  const char* v = std::getenv("BATON_TWIN_ON_CPU");
  return v != nullptr && std::string(v) == "1";
}

#define SKIP_WITHOUT_GPU() \
  if (::baton::cuda_device_count() == 0 && !::baton::cuda_testing::twin_on_cpu()) GTEST_SKIP() << "no CUDA device"

// The same seeded N(0, scale^2) data as the CPU kernel tests.
using cpu::testing::random_floats;

// The CUDA backend, the CPU backend, and the device buffers a test made (freed with the twin).
class Twin {
 public:
  explicit Twin(bool batch_invariant = true) {
    BackendOptions o;
    o.batch_invariant = batch_invariant;
    o.device = twin_on_cpu() && cuda_device_count() == 0 ? Device{} : Device{DeviceType::kCuda, 0};
    auto g = make_backend(o);
    EXPECT_TRUE(g.ok()) << g.status();
    if (g.ok()) gpu_ = std::move(*g);
    o.device = Device{};
    o.num_threads = 2;
    auto c = make_backend(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) cpu_ = std::move(*c);
  }
  Backend& gpu() { return *gpu_; }
  // Whether a CPU backend stands in for the GPU (BATON_TWIN_ON_CPU=1 on a machine without one).
  bool cpu_stand_in() const { return gpu_ != nullptr && gpu_->device().type == DeviceType::kCpu; }
  Backend& cpu() { return *cpu_; }

  // A device copy of `host` viewed with `shape` (contiguous).
  template <class T>
  TensorView upload(const std::vector<T>& host, DType dtype, std::initializer_list<std::int64_t> shape) {
    auto b = gpu_->allocate(host.size() * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status();
    gpu_->copy_to_device(b->data(), host.data(), host.size() * sizeof(T));
    buffers_.push_back(std::move(*b));
    return TensorView::contiguous(buffers_.back().data(), dtype, shape, gpu_->device());
  }
  // A device buffer of `bytes` bytes filled with `fill` bytes (NaN-looking for 0xff), viewed with shape.
  TensorView empty(std::size_t bytes, DType dtype, std::initializer_list<std::int64_t> shape, unsigned char fill = 0xff) {
    std::vector<unsigned char> host(bytes, fill);
    return upload(host, dtype, shape);
  }
  template <class T>
  std::vector<T> download(const TensorView& v, std::size_t count) {
    std::vector<T> host(count);
    gpu_->copy_to_host(host.data(), v.data, count * sizeof(T));
    return host;
  }

 private:
  std::unique_ptr<Backend> gpu_, cpu_;
  std::vector<DeviceBuffer> buffers_;
};

// |a - b| <= atol + rtol * |b| for every element; reports the first few failures.
inline void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, float atol, float rtol,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const float tol = atol + rtol * std::fabs(cpu[i]);
    if (!(std::fabs(gpu[i] - cpu[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " gpu " << gpu[i] << " cpu " << cpu[i] << " (tol " << tol << ")";
      if (++reported == 5) return;
    }
  }
}

}  // namespace baton::cuda_testing
