// The two checks of `baton verify-lossless`, run against a router through its public API: each
// prompt with speculation on (the deployment's own config) and off (the request's
// max_speculative_tokens = 0), from the same deployment.
//   - greedy identity: the token ids must be equal, prompt by prompt;
//   - sampled distribution: the first few tokens of many seeded samples, on and off, must pass a
//     two-sample chi-square homogeneity test (one table per prompt, combined).
// Many requests are in flight at once (a fixed pool of client threads).
//
// Must not: decide the verdict's output format (verify_lossless.cc prints), or retry a request.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baton/v1/api.grpc.pb.h"
#include "common/chi_square.h"

namespace baton::cli {

struct VerifyOptions {
  int concurrency = 32;
  std::chrono::milliseconds timeout{120000};
  int max_tokens = 64;         // greedy
  int samples = 1000;          // sampled: per prompt and per side (on / off)
  int sample_tokens = 3;       // sampled: generated tokens 2..N, jointly, are one category
  float temperature = 1.0f;
  std::uint64_t seed = 0;      // sampled: on uses seed + 2i, off seed + 2i + 1 (disjoint, independent)
  // Called as requests finish, at most once per tenth of a check (and at its end), from the
  // check's threads one at a time: the check's name, requests done, requests in all.
  std::function<void(std::string_view check, int done, int total)> progress;
};

// Speculation counters summed over the requests with speculation on (and, separately, off).
struct SpeculationSeen {
  std::int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::int64_t off_draft_tokens = 0;  // must stay 0: otherwise the deployment ignored the cap
  std::int64_t lossy_responses = 0;   // must stay 0: responses marked lossy (entropy verification)
  double acceptance_rate() const {
    return draft_tokens > 0 ? static_cast<double>(accepted_tokens) / static_cast<double>(draft_tokens) : 0.0;
  }
  void add(const SpeculationSeen& o);
};

struct GreedyMismatch {
  int prompt_index = 0;
  int position = 0;                       // 0-based index among the generated tokens
  std::optional<std::int32_t> with_spec;  // nullopt: that output ended earlier
  std::optional<std::int32_t> without_spec;
};

struct GreedyReport {
  int prompts_compared = 0;
  int prompts_skipped = 0;        // the router rejected the prompt itself (e.g. too long), on and off alike
  std::int64_t tokens_compared = 0;
  int mismatched_prompts = 0;
  std::optional<GreedyMismatch> first_mismatch;  // in prompt order
  std::vector<std::string> errors;               // request failures (each fails the check)
  SpeculationSeen speculation;
};

struct SampledReport {
  int prompts = 0;
  int samples = 0;  // per prompt and side
  HomogeneityTest test;  // combined over prompts
  std::vector<HomogeneityTest> per_prompt;
  std::vector<std::string> errors;
  SpeculationSeen speculation;
};

GreedyReport run_greedy_check(v1::Baton::Stub& stub, const std::vector<std::string>& prompts, const VerifyOptions& o);
SampledReport run_sampled_check(v1::Baton::Stub& stub, const std::vector<std::string>& prompts, const VerifyOptions& o);

// The short prompts of the sampled check (code, as the bundled family is trained on Python).
std::vector<std::string> default_sample_prompts();

}  // namespace baton::cli
