// `baton plan profile`'s measurements (plan_profile.h says what each figure means):
//   - the engine's prefill forwards and decode steps, timed in this process with the node's engine
//     configuration (same model, threads, speculative method), one engine per k measured;
//   - acceptance by position, from the engine at the largest k on the given prompts (greedy, every
//     request to its token limit, as `bench serve --ignore-eos` runs them);
//   - KV transfer: UCX between a sender and a receiver in this process over pools the size of a
//     large hand-off (the shared-memory path on one host), and a one-block transfer's latency;
//   - with an endpoint: the deployment's fixed costs the engine does not show, from a few idle
//     requests through its router (TTFT beyond prefill and hand-off; per-step time beyond the
//     forward).
//
// Must not: run while the machine serves other work it should not disturb (it uses every thread
// it is given), or start processes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/plan_profile.h"
#include "engine/engine.h"

namespace baton::cli {

struct MeasureOptions {
  EngineConfig engine;  // the node's configuration; `speculative` holds the largest k measured
  std::vector<int> ks;  // decode k values to time (0: no speculation); each <= the config's k
  std::vector<int> decode_batches = {1, 2, 4, 8, 16};
  std::vector<int> prefill_lengths = {32, 64, 128, 256, 512, 1024};
  std::vector<int> prefill_batches = {1, 4};
  int decode_context = 128;  // prompt tokens of each decoding request
  int timed_steps = 16;
  int repetitions = 3;       // prefill forwards per point (the median is kept)
  std::vector<std::vector<std::int32_t>> acceptance_prompts;  // token ids
  int acceptance_tokens = 64;
  std::string endpoint;      // a live deployment's router (gRPC); "" : overheads stay zero
  std::string tls_ca, api_key;
  std::function<void(const std::string&)> progress;  // one line per stage; may be empty
};

absl::StatusOr<DeploymentProfile> measure_profile(const MeasureOptions& options);

}  // namespace baton::cli
