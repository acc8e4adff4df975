#include "common/pd_rule.h"

#include "common/status.h"

namespace baton {
namespace {

constexpr std::string_view kRule =
    "the P/D rule: a prefill node runs num_speculative_tokens = 1 and a decode node >= 1; for hybrid models with "
    "recurrent layers both run the same k (the recurrent-state cache holds 1 + k slots per request and the "
    "handed-over state is located by k)";

std::string describe_setting(const SpeculationSetting& s) {
  if (!s.enabled()) return "no speculation";
  return str_cat("method ", s.method, ", num_speculative_tokens ", s.num_speculative_tokens);
}

absl::Status pair_error(const std::string& what, const SpeculationSetting& prefill, const SpeculationSetting& decode,
                        const PdModel& model) {
  return absl::FailedPreconditionError(str_cat("P/D rule: ", what, " [prefill node: ", describe_setting(prefill),
                                               "; decode node: ", describe_setting(decode), "; serving ",
                                               describe_model(model), "] — ", kRule));
}

std::string_view role_name(PdRole role) { return role == PdRole::kPrefill ? "prefill" : "decode"; }

}  // namespace

std::string describe_model(const PdModel& model) {
  std::string s = model.has_recurrent_layers ? "a hybrid model with recurrent layers" : "an attention-only model";
  if (!model.kind.empty()) s += str_cat(" (", model.kind, ")");
  return s;
}

bool is_model_free_method(std::string_view method) { return method == "ngram" || method == "suffix"; }

absl::Status check_pd_rule_for_node(PdRole role, const SpeculationSetting& setting, const PdModel& model) {
  if (!setting.enabled()) return absl::OkStatus();  // pairing is checked by check_pd_pairing()
  const std::int32_t k = setting.num_speculative_tokens;
  if (role == PdRole::kPrefill && !model.has_recurrent_layers && k != 1) {
    return absl::InvalidArgumentError(str_cat(
        "speculative_config: `num_speculative_tokens` is ", k, " on a prefill node serving ", describe_model(model),
        "; the P/D rule requires 1 there (prefill makes one draft token; decode nodes use k >= 1)",
        setting.method == "mtp"      ? " — for MTP an unset value means one per MTP layer"
        : setting.method == "medusa" ? " — for Medusa an unset value means one per head"
                                     : ""));
  }
  if (k < 1) {
    return absl::InvalidArgumentError(str_cat("speculative_config: `num_speculative_tokens` is ", k, " on a ",
                                              role_name(role), " node serving ", describe_model(model),
                                              "; the P/D rule requires k >= 1 (or no speculative_config)"));
  }
  return absl::OkStatus();
}

absl::Status check_pd_pairing(const SpeculationSetting& prefill, const SpeculationSetting& decode, const PdModel& model) {
  if (!prefill.enabled() && !decode.enabled()) return absl::OkStatus();
  if (prefill.enabled() && !decode.enabled()) {
    return pair_error(str_cat("the prefill node speculates (method ", prefill.method,
                              ") but the decode node does not; a prefill node's draft token needs a decode node "
                              "running the same method"),
                      prefill, decode, model);
  }
  if (!prefill.enabled()) {
    if (!is_model_free_method(decode.method)) {
      return pair_error(str_cat("the decode node's method ", decode.method,
                                " needs draft-side state from prefill (the prefill node must run ", decode.method,
                                " with num_speculative_tokens = 1), but the prefill node runs no speculation"),
                        prefill, decode, model);
    }
    if (model.has_recurrent_layers) {
      return pair_error(str_cat("this model has recurrent layers, so prefill and decode must use the same "
                                "num_speculative_tokens; prefill has 0 (no speculation), decode has ",
                                decode.num_speculative_tokens),
                        prefill, decode, model);
    }
    if (decode.num_speculative_tokens < 1) {
      return pair_error(str_cat("the decode node runs num_speculative_tokens = ", decode.num_speculative_tokens,
                                ", but decode must use >= 1"),
                        prefill, decode, model);
    }
    return absl::OkStatus();
  }
  if (prefill.method != decode.method) {
    return pair_error(str_cat("prefill uses method ", prefill.method, " but decode uses ", decode.method,
                              "; paired nodes must speculate with the same method"),
                      prefill, decode, model);
  }
  if (model.has_recurrent_layers) {
    if (prefill.num_speculative_tokens != decode.num_speculative_tokens || decode.num_speculative_tokens < 1) {
      return pair_error(str_cat("this model has recurrent layers, so prefill and decode must use the same "
                                "num_speculative_tokens (>= 1); prefill has ",
                                prefill.num_speculative_tokens, ", decode has ", decode.num_speculative_tokens),
                        prefill, decode, model);
    }
    return absl::OkStatus();
  }
  if (prefill.num_speculative_tokens != 1) {
    return pair_error(str_cat("the prefill node runs num_speculative_tokens = ", prefill.num_speculative_tokens,
                              ", but prefill must use 1"),
                      prefill, decode, model);
  }
  if (decode.num_speculative_tokens < 1) {
    return pair_error(str_cat("the decode node runs num_speculative_tokens = ", decode.num_speculative_tokens,
                              ", but decode must use >= 1"),
                      prefill, decode, model);
  }
  return absl::OkStatus();
}

}  // namespace baton
