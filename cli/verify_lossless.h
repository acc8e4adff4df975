// `baton verify-lossless --endpoint HOST:PORT`: a conformance check of a running deployment, that
// speculative decoding did not change its output. Through the router's public API it sends the
// same prompts with speculation on and off (per-request max_speculative_tokens = 0) and checks
// greedy token identity and, for sampling, that the first tokens' distribution is the same (a
// chi-square homogeneity test). Prints PASS or FAIL with the figures; --json FILE for machines.
// Exit codes: 0 pass, 1 fail (or the deployment could not be checked), 2 usage error.
#pragma once

namespace baton::cli {

int verify_lossless_main(int argc, char** argv);

}  // namespace baton::cli
