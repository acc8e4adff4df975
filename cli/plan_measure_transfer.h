// The parts of `baton plan profile` outside the engine (plan_measure.h):
//   measure_kv_transfer  UCX between a sender and a receiver in this process: bandwidth of a
//                        64 MiB hand-off in 1 MiB copies (as per-layer block runs go) and the
//                        latency of a one-block (4 KiB) transfer; medians of five after a warm-up.
//                        The receiver's pool is UCX shared memory when UCX allows it, as on a
//                        decode node, so on one host this is the shared-memory path; between hosts
//                        give the network's figure to `baton plan profile --kv-gbps` instead.
//   measure_overheads    a live deployment's costs beyond the engine's forwards: five idle requests
//                        through its router (gRPC), each a random prompt of `prompt_tokens` and 33
//                        output tokens; the median TTFT beyond the profile's prefill and hand-off
//                        is the per-request overhead, the median step time (TPOT times tokens per
//                        step, from the acceptance the server reports) beyond the profile's step at
//                        batch 1 is the per-step overhead. Never below zero. When the endpoint is
//                        on this host (a loopback address), the host's CPU time over the same
//                        requests (/proc/stat) beyond the engines' modelled forwards, per output
//                        token, is the serving path's CPU (router, client, gRPC and transports).
//
// Must not: touch engine objects.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "cli/plan_profile.h"

namespace baton::cli {

struct TransferSpeed {
  double gbps = 0;
  double latency_s = 0;
};

absl::StatusOr<TransferSpeed> measure_kv_transfer();

struct DeploymentOverheads {
  double request_s = 0;
  double step_s = 0;
  double serving_cpu_per_token_s = 0;  // 0 unless the endpoint is on this host
};

// `profile` must hold the prefill, decode (at `k`) and KV figures already.
absl::StatusOr<DeploymentOverheads> measure_overheads(const std::string& endpoint, const std::string& tls_ca,
                                                      const std::string& api_key, int prompt_tokens,
                                                      const DeploymentProfile& profile, int k);

}  // namespace baton::cli
