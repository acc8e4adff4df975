// The CPU backend's sample_rows() (the engine's path for sampled requests without penalties,
// min_tokens or logprobs) draws the host Sampler's tokens row for row, on one thread and split
// across the pool; NaN, all -inf and (sampled) +inf rows get argmax_rows' codes, and skipped rows
// are left alone.
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
  testing::expect_bad_rows_coded(*cpu_backend(2));
}

}  // namespace
}  // namespace baton
