// The test-only broken sampler (the negative control of `baton verify-lossless`) must really be
// wrong, in both modes, or the end-to-end check that it is caught proves nothing.
#include "engine/spec/broken_rejection_sampler.h"

#include <cstdint>
#include <vector>

#include "engine/spec/rejection_sampler.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

TEST(BrokenSamplerForTesting, GreedyAcceptsAWrongFirstDraft) {
  // Rows of a vocabulary of 5 whose argmaxes are 2, 4, 1; the first draft (3) is not the argmax.
  const std::int32_t vocab = 5;
  const std::vector<std::int32_t> drafts = {3, 4};
  std::vector<float> target(3 * vocab, 0.0f);
  target[0 * vocab + 2] = target[1 * vocab + 4] = target[2 * vocab + 1] = 1.0f;
  const VerifyInput in{vocab, drafts, target, {}, /*greedy=*/true};
  const VerifyResult r = verify_broken_for_testing(in, VerifyRandomness{});
  EXPECT_EQ(r.num_accepted, 2);
  EXPECT_EQ(r.next_token, 1);
  EXPECT_EQ(verify_standard(in, VerifyRandomness{}).num_accepted, 0);
}

TEST(BrokenSamplerForTesting, SampledOneHotDraftsAreEmittedFarTooOften) {
  // Target p = (0.3, 0.7) at the draft's position; the draft is token 0.
  const std::vector<std::int32_t> drafts = {0};
  const std::vector<float> target = {0.3f, 0.7f, 0.5f, 0.5f};
  const VerifyInput in{2, drafts, target, {}, /*greedy=*/false};
  const int n = 20000;
  int emitted_draft = 0;
  for (int s = 0; s < n; ++s) {
    const VerifyResult r = verify_broken_for_testing(in, VerifyRandomness{static_cast<std::uint64_t>(s), 10});
    const std::int32_t first = r.num_accepted > 0 ? drafts[0] : r.next_token;
    emitted_draft += first == 0 ? 1 : 0;
  }
  // Accepted with probability 0.6, else redrawn from p: 0.6 + 0.4 * 0.3 = 0.72 instead of 0.3.
  EXPECT_NEAR(static_cast<double>(emitted_draft) / n, 0.72, 0.02);
}

}  // namespace
}  // namespace baton
