// The CPU backend's sample_rows() (the engine's path for sampled requests without penalties,
// min_tokens or logprobs) draws the host Sampler's tokens row for row, on one thread and split
// across the pool; NaN and all -inf rows get argmax_rows' codes and skipped rows are left alone.
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/engine/sample/backend_sampling_check.h"

namespace baton {
namespace {

std::unique_ptr<Backend> cpu_backend(int threads) {
  BackendOptions o;
  o.num_threads = threads;
  auto made = make_backend(o);
  BATON_CHECK(made.ok(), made.status().ToString());
  return std::move(*made);
}

TEST(CpuSampling, SameTokensAsTheHostSampler) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    testing::expect_samples_like_the_host(*cpu_backend(threads));
  }
}

TEST(CpuSampling, BadRowsGetTheirCodesAndSkippedRowsAreLeftAlone) {
  auto backend = cpu_backend(2);
  const std::int64_t vocab = 300;
  std::vector<float> logits = testing::sampling_rows(4, vocab, 5);
  logits[static_cast<std::size_t>(vocab + 123)] = std::numeric_limits<float>::quiet_NaN();
  std::fill(logits.begin() + 2 * vocab, logits.begin() + 3 * vocab, -std::numeric_limits<float>::infinity());
  std::vector<std::int32_t> ids = {-7, -7, -7, -7};
  std::vector<SampleRowParams> params(4);
  for (auto& p : params) p.temperature = 0.8f;
  params[3].temperature = -1.0f;  // skipped
  backend->sample_rows(TensorView::contiguous(logits.data(), DType::kF32, {4, vocab}), params,
                       TensorView::contiguous(ids.data(), DType::kI32, {4}));
  EXPECT_GE(ids[0], 0);
  EXPECT_LT(ids[0], vocab);
  EXPECT_EQ(ids[1], kArgmaxHasNaN);
  EXPECT_EQ(ids[2], kArgmaxNoFinite);
  EXPECT_EQ(ids[3], -7);
}

}  // namespace
}  // namespace baton
