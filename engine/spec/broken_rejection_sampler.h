// TESTING ONLY: a deliberately lossy verification of drafts, the negative control of `baton
// verify-lossless` (decode node flag --testing-broken-rejection-sampler). It exists so that the
// conformance check can be shown to catch a sampler that does not keep the target's distribution.
//
// What it gets wrong, on purpose (compare rejection_sampler.h):
//   - greedy: the first draft is accepted without looking at the target (the rest are checked as
//     usual), so greedy output differs from plain decoding wherever that draft was wrong;
//   - sampled: a draft x is accepted when u <= 2 p(x) / q(x) (twice too eagerly; q = 1 for one-hot
//     drafts), and a rejected position is redrawn from the target p instead of the residual
//     normalize(max(p - q, 0)), so the draft can be emitted again after its rejection.
// Must never be used to serve: nothing but the flag above reaches it.
#pragma once

#include "engine/spec/rejection_sampler.h"

namespace baton {

// Same contract as verify_standard except for the faults above. Reads the request's verify stream.
VerifyResult verify_broken_for_testing(const VerifyInput& in, const VerifyRandomness& random);

}  // namespace baton
