// The CUDA backend's sample_rows() against the host Sampler on the same rows and seeds
// (tests/engine/sample/backend_sampling_check.h: every setting, vocabularies from 7 to 128256,
// tied rows), and the codes of rows without a token. Skips on a machine without a GPU.
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

TEST(CudaSampling, BadRowsGetTheirCodesAndSkippedRowsAreLeftAlone) {
  if (available_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  testing::expect_bad_rows_coded(*cuda_backend());
}

}  // namespace
}  // namespace baton
