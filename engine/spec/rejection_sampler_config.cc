#include "engine/spec/rejection_sampler_config.h"

#include <string>

#include "common/status.h"

namespace baton {
namespace {

using nlohmann::json;

constexpr const char* kKey = "rejection_sampler_config";

absl::Status error(std::string_view where, std::string_view key, const std::string& what) {
  return absl::InvalidArgumentError(str_cat(where, ": `", kKey, ".", key, "` ", what));
}

absl::Status read_bool(const json& j, std::string_view where, const char* key, std::optional<bool>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return error(where, key, str_cat("must be true or false, got ", it->dump()));
  *out = it->get<bool>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RejectionSamplerConfig> parse_rejection_sampler_config(const json& value, std::string_view where) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(str_cat(where, ": `", kKey, "` must be an object, got ", value.dump()));
  }
  for (const auto& [key, v] : value.items()) {
    if (key != "enable_block_verify" && key != "enable_entropy_verify" && key != "posterior_threshold" &&
        key != "posterior_alpha") {
      return error(where, key,
                   "is not a known key (known: enable_block_verify, enable_entropy_verify, posterior_threshold, "
                   "posterior_alpha)");
    }
  }
  RejectionSamplerConfig c;
  BATON_RETURN_IF_ERROR(read_bool(value, where, "enable_block_verify", &c.enable_block_verify));
  std::optional<bool> entropy;
  BATON_RETURN_IF_ERROR(read_bool(value, where, "enable_entropy_verify", &entropy));
  c.entropy.enabled = entropy.value_or(false);
  if (auto t = value.find("posterior_threshold"); t != value.end() && !t->is_null()) {
    if (!t->is_number() || !(t->get<double>() > 0.0) || t->get<double>() > 1.0) {
      return error(where, "posterior_threshold", str_cat("must be a number in (0, 1], got ", t->dump()));
    }
    c.entropy.posterior_threshold = t->get<double>();
  }
  if (auto a = value.find("posterior_alpha"); a != value.end() && !a->is_null()) {
    // An upper bound keeps exp(-alpha * H) meaningful; beyond 1e6 every threshold is 0 anyway.
    if (!a->is_number() || !(a->get<double>() >= 0.0) || a->get<double>() > 1e6) {
      return error(where, "posterior_alpha", str_cat("must be a number in [0, 1e6], got ", a->dump()));
    }
    c.entropy.posterior_alpha = a->get<double>();
  }
  return c;
}

json rejection_sampler_config_json(bool block_verify, const EntropyVerification& entropy) {
  return json{{"enable_block_verify", block_verify},
              {"enable_entropy_verify", entropy.enabled},
              {"posterior_threshold", entropy.posterior_threshold},
              {"posterior_alpha", entropy.posterior_alpha}};
}

absl::Status merge_additional_config(std::string_view additional_json, json* speculative) {
  const json a = json::parse(additional_json.begin(), additional_json.end(), nullptr, /*allow_exceptions=*/false);
  if (a.is_discarded() || !a.is_object()) {
    return absl::InvalidArgumentError(
        R"(--additional-config: expected a JSON object, e.g. {"rejection_sampler_config": {"enable_entropy_verify": true}})");
  }
  for (const auto& [key, v] : a.items()) {
    if (key != kKey) {
      return absl::InvalidArgumentError(str_cat("--additional-config: `", key, "` is not a key Baton reads (it reads ",
                                                kKey, " only)"));
    }
  }
  auto it = a.find(kKey);
  if (it == a.end() || it->is_null()) return absl::OkStatus();
  if (speculative == nullptr || !speculative->is_object()) {
    return absl::InvalidArgumentError(str_cat("--additional-config: ", kKey, " needs --speculative-config"));
  }
  if (auto existing = speculative->find(kKey); existing != speculative->end() && *existing != *it) {
    return absl::InvalidArgumentError(str_cat("--additional-config: ", kKey, " ", it->dump(),
                                              " contradicts the speculative config's ", existing->dump()));
  }
  (*speculative)[kKey] = *it;
  return absl::OkStatus();
}

}  // namespace baton
