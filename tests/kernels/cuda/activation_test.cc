// The CUDA SiLU·mul against the CPU backend's. Skipped (not failed) on a machine without a GPU.
#include "kernels/cuda/activation.cuh"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace baton {
namespace {

TEST(CudaActivation, SiluMulMatchesCpu) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  const std::int64_t tokens = 3, inter = 1000;
  std::vector<float> in(static_cast<std::size_t>(tokens * 2 * inter));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(static_cast<float>(i)) * 4.0f;
  float *d_in = nullptr, *d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, in.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, static_cast<std::size_t>(tokens * inter) * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cuda::silu_mul_f32(d_in, d_out, tokens, inter, nullptr), cudaSuccess);
  std::vector<float> gpu(static_cast<std::size_t>(tokens * inter)), cpu(gpu.size());
  ASSERT_EQ(cudaMemcpy(gpu.data(), d_out, gpu.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_in);
  cudaFree(d_out);
  auto backend = cpu::CpuBackend::create({});
  ASSERT_TRUE(backend.ok());
  (*backend)->silu_mul(TensorView::contiguous(in.data(), DType::kF32, {tokens, 2 * inter}),
                       TensorView::contiguous(cpu.data(), DType::kF32, {tokens, inter}));
  for (std::size_t i = 0; i < gpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-5f * (1.0f + std::fabs(cpu[i])));
}

}  // namespace
}  // namespace baton
