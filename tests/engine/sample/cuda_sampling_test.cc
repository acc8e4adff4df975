// The CUDA backend's sample_rows() against the host Sampler on the same rows and seeds: the same
// token for every row, over temperature, top-k (ties at the k-th value), top-p (cuts inside runs
// of tied logits), min-p and their mixes, for vocabularies from 7 to Llama 3's 128256; greedy rows
// take argmax_rows' pick, a NaN row gets its code, and a skipped row is left alone. Skips on a
// machine without a GPU.
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/engine/sample/backend_sampling_check.h"

namespace baton {
namespace {

std::unique_ptr<Backend> cuda_backend() {
  BackendOptions o;
  o.device = Device{DeviceType::kCuda, 0};
  auto made = make_backend(o);
  BATON_CHECK(made.ok(), made.status().ToString());
  return std::move(*made);
}

TEST(CudaSampling, SameTokensAsTheHostSampler) {
  if (available_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  testing::expect_samples_like_the_host(*cuda_backend());
}

TEST(CudaSampling, NanRowsGetTheirCodeAndSkippedRowsAreLeftAlone) {
  if (available_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<Backend> backend = cuda_backend();
  Backend& gpu = *backend;
  const std::int64_t vocab = 300;
  std::vector<float> logits = testing::sampling_rows(3, vocab, 5);
  logits[static_cast<std::size_t>(vocab + 123)] = std::nanf("");
  auto d_logits = gpu.allocate(logits.size() * sizeof(float));
  auto d_ids = gpu.allocate(3 * sizeof(std::int32_t));
  ASSERT_TRUE(d_logits.ok() && d_ids.ok());
  gpu.copy_to_device(d_logits->data(), logits.data(), logits.size() * sizeof(float));
  const std::vector<std::int32_t> sentinel = {-7, -7, -7};
  gpu.copy_to_device(d_ids->data(), sentinel.data(), 3 * sizeof(std::int32_t));
  std::vector<SampleRowParams> params(3);
  params[0].temperature = 0.8f;
  params[1].temperature = 0.8f;  // the NaN row
  params[2].temperature = -1.0f;  // skipped
  gpu.sample_rows(d_logits->view(DType::kF32, {3, vocab}), params, d_ids->view(DType::kI32, {3}));
  std::vector<std::int32_t> ids(3);
  gpu.copy_to_host(ids.data(), d_ids->data(), 3 * sizeof(std::int32_t));
  EXPECT_GE(ids[0], 0);
  EXPECT_LT(ids[0], vocab);
  EXPECT_EQ(ids[1], kArgmaxHasNaN);
  EXPECT_EQ(ids[2], -7);
}

}  // namespace
}  // namespace baton
