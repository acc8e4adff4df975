// What `baton plan` knows about one deployment's hardware and model: the measured speeds it
// simulates a request trace with (plan_sim.h). Written by `baton plan profile` (plan_measure.h) as
// JSON, read back by `baton plan` and `baton plan simulate`.
//
//   prefill      seconds of one prefill forward by (sequences in the batch, tokens per sequence),
//                measured as the prefill node runs (the speculative method at k = 1);
//   decode       seconds of one decode step by (k, running requests): the proposer's drafts and
//                the target's verification of k + 1 positions each (k = 0: plain decoding);
//   acceptance   P(the first i + 1 drafts are all accepted), i < the largest k measured, on the
//                profile's prompts: a step at k yields 1 + sum_{i<k} acceptance[i] tokens on average;
//   kv           bytes of KV cache one prompt token hands over (every pool, draft's included), the
//                transport's bandwidth (GB/s) and the latency of a small transfer;
//   overheads    fixed latency per request (router, hand-off round trips) and per decode step that
//                the engine's forward does not show; measured against a live deployment
//                (`--endpoint`), else zero;
//   serving CPU  CPU seconds per output token that the serving path spends outside the engines'
//                forwards (router, client, gRPC and transport threads): measured only when the
//                endpoint runs on this host, for simulations of nodes that share its cores.
//
// Must not: measure anything (plan_measure.h does) or know about requests in flight (plan_sim.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

struct PrefillPoint {
  int batch = 1;             // sequences in the forward
  int tokens_per_seq = 0;    // prompt tokens of each
  double seconds = 0;        // the forward (every chunk of it), median of the repetitions
};

struct DecodePoint {
  int k = 0;                 // drafts per request per step (0: no speculation)
  int batch = 1;             // running requests
  double step_seconds = 0;   // one step: propose, verify, sample; median over the timed steps
};

struct DeploymentProfile {
  std::string model;               // the target model's directory, as given
  std::string method;              // speculative method ("" when none)
  std::string device = "cpu";
  int threads = 0;                 // CPU threads per engine (what each node runs with)
  int host_cores = 0;              // cores of the machine the profile was measured on
  int num_layers = 0;              // of the target: the KV hand-off streams layer by layer
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  std::vector<PrefillPoint> prefill;
  std::vector<DecodePoint> decode;
  std::vector<double> acceptance;  // [largest k]: P(drafts 0..i all accepted)
  double kv_bytes_per_token = 0;
  double kv_gbps = 0;              // 1e9 bytes/s
  double kv_latency_s = 0;
  double request_overhead_s = 0;
  double step_overhead_s = 0;
  double serving_cpu_per_token_s = 0;

  // Interpolated (piecewise linear in tokens, then in batch; linear extrapolation past the last
  // measured length, and by tokens past the largest measured batch).
  double prefill_seconds(int batch, int tokens_per_seq) const;
  // Interpolated in batch for a measured k (extrapolated past the largest batch); NOT_FOUND for a
  // k the profile has no measurement of.
  absl::StatusOr<double> decode_step_seconds(int k, int batch) const;
  // Tokens one decode step yields per request at k (1 at k = 0).
  double expected_tokens_per_step(int k) const;
  // The k values the profile measured, ascending.
  std::vector<int> measured_ks() const;
};

nlohmann::json profile_to_json(const DeploymentProfile& p);
// INVALID_ARGUMENT naming `where` and the key on a malformed profile.
absl::StatusOr<DeploymentProfile> profile_from_json(const nlohmann::json& j, const std::string& where);
absl::StatusOr<DeploymentProfile> read_profile(const std::string& path);

}  // namespace baton::cli
