// rejection_sampler_config: vLLM Ascend's keys for the rejection sampler ({enable_block_verify,
// enable_entropy_verify, posterior_threshold, posterior_alpha}), read as a key of the speculative
// config, and --additional-config (vLLM Ascend's flag, of which Baton knows only that key) merged
// into the speculative config JSON.
//
// enable_block_verify selects Baton's block verification (exact, lossless; the same as
// rejection_sample_method "block"), not vLLM Ascend's own lossy block rule. Entropy verification is
// lossy (rejection_sampler.h says how).
//
// Must not: accept a key it does not know, or a combination that contradicts
// rejection_sample_method; errors name the key.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/spec/rejection_sampler.h"
#include "nlohmann/json.hpp"

namespace baton {

struct RejectionSamplerConfig {
  std::optional<bool> enable_block_verify;  // unset: rejection_sample_method decides
  EntropyVerification entropy;
};

// `value` is rejection_sampler_config's value; `where` prefixes errors (e.g. "speculative_config").
absl::StatusOr<RejectionSamplerConfig> parse_rejection_sampler_config(const nlohmann::json& value,
                                                                      std::string_view where);

// The object as vLLM Ascend spells it.
nlohmann::json rejection_sampler_config_json(bool block_verify, const EntropyVerification& entropy);

// Merges --additional-config's JSON object (vLLM Ascend's flag) into `speculative` (the speculative
// config's object): its rejection_sampler_config becomes the speculative config's key of that
// name. Errors: not a JSON object, a key other than rejection_sampler_config, no speculative
// config to apply it to (`speculative` null), or both places setting it differently.
absl::Status merge_additional_config(std::string_view additional_json, nlohmann::json* speculative);

}  // namespace baton
