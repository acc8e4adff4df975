#include "engine/spec/config.h"

#include <set>

#include "common/pd_rule.h"
#include "common/status.h"
#include "engine/spec/rejection_sampler_config.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "speculative_config";

absl::Status key_error(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(str_cat(kWhere, ": `", key, "` ", what));
}

absl::Status read_int(const json& j, const std::string& key, std::int32_t min_value, std::int32_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer() || it->get<std::int64_t>() < min_value || it->get<std::int64_t>() > INT32_MAX) {
    return key_error(key, str_cat("must be an integer >= ", min_value, ", got ", it->dump()));
  }
  *out = static_cast<std::int32_t>(it->get<std::int64_t>());
  return absl::OkStatus();
}

absl::Status read_float(const json& j, const std::string& key, double lo, double hi, bool lo_open, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return key_error(key, str_cat("must be a number, got ", it->dump()));
  const double v = it->get<double>();
  // The float kept must be in range too: 1e-300 > 0 rounds to 0.0f (checked after the range that
  // makes the conversion defined).
  if ((lo_open ? v <= lo : v < lo) || v > hi || (lo_open && static_cast<float>(v) <= lo)) {
    return key_error(key, str_cat("must be in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", v));
  }
  *out = static_cast<float>(v);
  return absl::OkStatus();
}

// draft_model_config: only its hf_config.eagle_aux_hidden_state_layer_ids, for extract_hidden_states
// (vLLM's spelling). Ids are checked against the target's layers by the proposer.
absl::Status read_draft_model_config(const json& j, const std::string& method, SpeculativeConfig* c) {
  const bool extract = c->method == SpecMethod::kExtractHiddenStates;
  auto it = j.find("draft_model_config");
  if (it == j.end() || it->is_null()) {
    if (extract) {
      return key_error("draft_model_config", "is required for method extract_hidden_states: "
                                             R"({"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}})");
    }
    return absl::OkStatus();
  }
  if (!extract) return key_error("draft_model_config", str_cat("is read for method extract_hidden_states only, not ", method));
  const json* ids = nullptr;
  if (it->is_object() && it->size() == 1 && it->contains("hf_config") && (*it)["hf_config"].is_object() &&
      (*it)["hf_config"].size() == 1) {
    auto f = (*it)["hf_config"].find("eagle_aux_hidden_state_layer_ids");
    if (f != (*it)["hf_config"].end()) ids = &*f;
  }
  if (ids == nullptr) {
    return key_error("draft_model_config", str_cat("must be {\"hf_config\": {\"eagle_aux_hidden_state_layer_ids\": [...]}} "
                                                   "(Baton reads no other key), got ", it->dump()));
  }
  constexpr std::size_t kMaxLayers = 256;
  if (!ids->is_array() || ids->empty() || ids->size() > kMaxLayers) {
    return key_error("draft_model_config", str_cat(".hf_config.eagle_aux_hidden_state_layer_ids must list 1 to ", kMaxLayers,
                                                   " layer ids, got ", ids->dump()));
  }
  std::set<std::int64_t> seen;
  for (const json& id : *ids) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > INT32_MAX ||
        !seen.insert(id.get<std::int64_t>()).second) {
      return key_error("draft_model_config", str_cat(".hf_config.eagle_aux_hidden_state_layer_ids must be distinct layer "
                                                     "indices >= 0, got ", ids->dump()));
    }
    c->hidden_state_layer_ids.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kSuffix: return "suffix";
    case SpecMethod::kDraftModel: return "draft_model";
    case SpecMethod::kEagle: return "eagle";
    case SpecMethod::kEagle3: return "eagle3";
    case SpecMethod::kMtp: return "mtp";
    case SpecMethod::kMedusa: return "medusa";
    case SpecMethod::kDflash: return "dflash";
    case SpecMethod::kExtractHiddenStates: return "extract_hidden_states";
  }
  return "?";
}

std::string_view node_role_name(NodeRole r) {
  switch (r) {
    case NodeRole::kColocated: return "colocated";
    case NodeRole::kPrefill: return "prefill";
    case NodeRole::kDecode: return "decode";
  }
  return "?";
}

absl::StatusOr<SpeculativeConfig> SpeculativeConfig::parse(std::string_view json_text, NodeRole role,
                                                           bool model_has_recurrent_layers) {
  const json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(str_cat(kWhere, ": expected a JSON object, e.g. ",
                                              R"({"method": "ngram", "num_speculative_tokens": 4})"));
  }
  return from_json(j, role, model_has_recurrent_layers);
}

absl::StatusOr<SpeculativeConfig> SpeculativeConfig::from_json(const json& j, NodeRole role,
                                                               bool model_has_recurrent_layers) {
  static const std::set<std::string> kKnown = {
      "method", "model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
      "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
      "suffix_decoding_min_token_prob", "draft_tensor_parallel_size", "rejection_sample_method",
      "draft_sample_method", "disable_by_batch_size", "adaptive_draft_length", "proposer_endpoint",
      "proposer_budget_ms", "rejection_sampler_config", "draft_model_config"};
  for (const auto& [key, value] : j.items()) {
    if (!kKnown.contains(key)) {
      return key_error(key, "is not a known key (known: method, model, num_speculative_tokens, prompt_lookup_min/max, "
                            "suffix_decoding_*, draft_tensor_parallel_size, rejection_sample_method, draft_sample_method, "
                            "disable_by_batch_size, adaptive_draft_length, proposer_endpoint, proposer_budget_ms, "
                            "rejection_sampler_config, draft_model_config)");
    }
  }
  SpeculativeConfig c;
  auto method = j.find("method");
  if (method == j.end() || !method->is_string()) {
    return key_error("method", "is required: one of ngram, suffix, draft_model, eagle, eagle3, mtp, medusa, "
                               "dflash, extract_hidden_states");
  }
  const std::string m = method->get<std::string>();
  if (m == "ngram") c.method = SpecMethod::kNgram;
  else if (m == "suffix") c.method = SpecMethod::kSuffix;
  else if (m == "draft_model") c.method = SpecMethod::kDraftModel;
  else if (m == "eagle") c.method = SpecMethod::kEagle;
  else if (m == "eagle3") c.method = SpecMethod::kEagle3;
  else if (m == "mtp") c.method = SpecMethod::kMtp;
  else if (m == "medusa") c.method = SpecMethod::kMedusa;
  else if (m == "dflash") c.method = SpecMethod::kDflash;
  else if (m == "extract_hidden_states") c.method = SpecMethod::kExtractHiddenStates;
  else return key_error("method", str_cat("is \"", m, "\"; use ngram, suffix, draft_model, eagle, eagle3, mtp, medusa, "
                                          "dflash or extract_hidden_states"));

  if (auto model = j.find("model"); model != j.end() && !model->is_null()) {
    if (!model->is_string() || model->get<std::string>().empty()) return key_error("model", "must be a directory path");
    c.model = model->get<std::string>();
  }
  const bool needs_model = c.method == SpecMethod::kDraftModel || c.method == SpecMethod::kEagle ||
                           c.method == SpecMethod::kEagle3 || c.method == SpecMethod::kMedusa ||
                           c.method == SpecMethod::kDflash;
  if (needs_model && c.model.empty()) return key_error("model", str_cat("is required for method ", m));
  if (c.method == SpecMethod::kExtractHiddenStates && !c.model.empty()) {
    return key_error("model", "is not used by method extract_hidden_states (it runs no draft model)");
  }

  // k: required except for suffix (defaults to the tree depth), mtp (one per layer) and medusa (one
  // per head), as in vLLM.
  c.num_speculative_tokens = -1;
  BATON_RETURN_IF_ERROR(read_int(j, "num_speculative_tokens", 0, &c.num_speculative_tokens));
  BATON_RETURN_IF_ERROR(read_draft_model_config(j, m, &c));
  BATON_RETURN_IF_ERROR(read_int(j, "suffix_decoding_max_tree_depth", 1, &c.suffix_decoding_max_tree_depth));
  BATON_RETURN_IF_ERROR(read_int(j, "suffix_decoding_max_cached_requests", 0, &c.suffix_decoding_max_cached_requests));
  BATON_RETURN_IF_ERROR(read_float(j, "suffix_decoding_max_spec_factor", 0.0, 1e6, true, &c.suffix_decoding_max_spec_factor));
  BATON_RETURN_IF_ERROR(read_float(j, "suffix_decoding_min_token_prob", 0.0, 1.0, false, &c.suffix_decoding_min_token_prob));
  if (c.num_speculative_tokens < 0) {
    if (c.method == SpecMethod::kSuffix) {
      c.num_speculative_tokens = c.suffix_decoding_max_tree_depth;
    } else if (c.method == SpecMethod::kExtractHiddenStates) {
      c.num_speculative_tokens = 1;
    } else if (c.method != SpecMethod::kMtp && c.method != SpecMethod::kMedusa) {
      return key_error("num_speculative_tokens", str_cat("is required for method ", m));
    }
  }
  if (c.method == SpecMethod::kExtractHiddenStates && c.num_speculative_tokens != 1) {
    return key_error("num_speculative_tokens", str_cat("must be 1 for method extract_hidden_states (it saves hidden "
                                                       "states and drafts nothing), got ", c.num_speculative_tokens));
  }

  // prompt_lookup_min/max: if only one is set the other copies it; min > max is an error.
  const bool has_min = j.contains("prompt_lookup_min") && !j["prompt_lookup_min"].is_null();
  const bool has_max = j.contains("prompt_lookup_max") && !j["prompt_lookup_max"].is_null();
  BATON_RETURN_IF_ERROR(read_int(j, "prompt_lookup_min", 1, &c.prompt_lookup_min));
  BATON_RETURN_IF_ERROR(read_int(j, "prompt_lookup_max", 1, &c.prompt_lookup_max));
  if (has_min && !has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  if (has_max && !has_min) c.prompt_lookup_min = c.prompt_lookup_max;
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    return key_error("prompt_lookup_min", str_cat("(", c.prompt_lookup_min, ") must not exceed prompt_lookup_max (",
                                                  c.prompt_lookup_max, ")"));
  }
  // A threshold of 1 would turn speculation off for good: refused, as vLLM refuses it.
  BATON_RETURN_IF_ERROR(read_int(j, "disable_by_batch_size", 2, &c.disable_by_batch_size));
  if (auto a = j.find("adaptive_draft_length"); a != j.end() && !a->is_null()) {
    if (!a->is_boolean()) return key_error("adaptive_draft_length", str_cat("must be true or false, got ", a->dump()));
    c.adaptive_draft_length = a->get<bool>();
  }
  BATON_RETURN_IF_ERROR(read_int(j, "draft_tensor_parallel_size", 1, &c.draft_tensor_parallel_size));
  if (c.draft_tensor_parallel_size != 1) {
    return key_error("draft_tensor_parallel_size", "must be 1 (drafts run on one device)");
  }
  if (auto r = j.find("rejection_sample_method"); r != j.end() && !r->is_null()) {
    const std::string v = r->is_string() ? r->get<std::string>() : "";
    if (v == "standard") c.rejection_sample_method = RejectionMethod::kStandard;
    else if (v == "block") c.rejection_sample_method = RejectionMethod::kBlock;
    else return key_error("rejection_sample_method", str_cat("is ", r->dump(), "; use standard or block"));
  }
  if (auto r = j.find("rejection_sampler_config"); r != j.end() && !r->is_null()) {
    BATON_ASSIGN_OR_RETURN(const RejectionSamplerConfig rs, parse_rejection_sampler_config(*r, kWhere));
    if (rs.enable_block_verify) {
      const auto wanted = *rs.enable_block_verify ? RejectionMethod::kBlock : RejectionMethod::kStandard;
      const bool method_given = j.contains("rejection_sample_method") && !j["rejection_sample_method"].is_null();
      if (method_given && wanted != c.rejection_sample_method) {
        return key_error("rejection_sampler_config", str_cat(".enable_block_verify (", *rs.enable_block_verify ? "true" : "false",
                                                             ") contradicts rejection_sample_method ",
                                                             j["rejection_sample_method"].dump()));
      }
      c.rejection_sample_method = wanted;
    }
    c.entropy_verification = rs.entropy;
  }
  if (auto d = j.find("draft_sample_method"); d != j.end() && !d->is_null()) {
    const std::string v = d->is_string() ? d->get<std::string>() : "";
    if (v == "greedy") c.draft_sample_method = DraftSampleMethod::kGreedy;
    else if (v == "probabilistic") c.draft_sample_method = DraftSampleMethod::kProbabilistic;
    else return key_error("draft_sample_method", str_cat("is ", d->dump(), "; use greedy or probabilistic"));
  }
  if (c.draft_sample_method == DraftSampleMethod::kProbabilistic &&
      (c.method == SpecMethod::kNgram || c.method == SpecMethod::kSuffix ||
       c.method == SpecMethod::kExtractHiddenStates)) {
    return key_error("draft_sample_method", str_cat("probabilistic needs a model-based method; ", m, " drafts are deterministic"));
  }

  if (auto e = j.find("proposer_endpoint"); e != j.end() && !e->is_null()) {
    const std::string v = e->is_string() ? e->get<std::string>() : "";
    const std::size_t colon = v.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == v.size()) {
      return key_error("proposer_endpoint", str_cat("must be HOST:PORT of a baton-proposer, got ", e->dump()));
    }
    if (c.method != SpecMethod::kNgram && c.method != SpecMethod::kSuffix) {
      return key_error("proposer_endpoint", str_cat("works with method ngram or suffix only (the sidecar has no model); "
                                                    "method is ", m));
    }
    c.proposer_endpoint = v;
  }
  if (auto b = j.find("proposer_budget_ms"); b != j.end() && !b->is_null()) {
    if (!b->is_number() || b->get<double>() <= 0.0 || b->get<double>() > 10000.0) {
      return key_error("proposer_budget_ms", str_cat("must be a number in (0, 10000] milliseconds, got ", b->dump()));
    }
    if (c.proposer_endpoint.empty()) return key_error("proposer_budget_ms", "needs proposer_endpoint");
    c.proposer_budget_ms = b->get<double>();
  }

  // The P/D rule for this node's role, when k is known here (MTP's and Medusa's defaults are
  // resolved by the engine, which checks it then).
  if (c.num_speculative_tokens >= 0) BATON_RETURN_IF_ERROR(validate_for_role(c, role, model_has_recurrent_layers));
  return c;
}

nlohmann::json SpeculativeConfig::to_json() const {
  json j = {{"method", std::string(spec_method_name(method))},
          {"model", model.empty() ? json(nullptr) : json(model)},
          {"num_speculative_tokens", num_speculative_tokens},
          {"prompt_lookup_min", prompt_lookup_min},
          {"prompt_lookup_max", prompt_lookup_max},
          {"suffix_decoding_max_tree_depth", suffix_decoding_max_tree_depth},
          {"suffix_decoding_max_cached_requests", suffix_decoding_max_cached_requests},
          {"suffix_decoding_max_spec_factor", suffix_decoding_max_spec_factor},
          {"suffix_decoding_min_token_prob", suffix_decoding_min_token_prob},
          {"draft_tensor_parallel_size", draft_tensor_parallel_size},
          {"rejection_sample_method", rejection_sample_method == RejectionMethod::kBlock ? "block" : "standard"},
          {"draft_sample_method", draft_sample_method == DraftSampleMethod::kProbabilistic ? "probabilistic" : "greedy"}};
  if (disable_by_batch_size > 0) j["disable_by_batch_size"] = disable_by_batch_size;
  if (!hidden_state_layer_ids.empty()) {
    j["draft_model_config"] = {{"hf_config", {{"eagle_aux_hidden_state_layer_ids", hidden_state_layer_ids}}}};
  }
  if (adaptive_draft_length) j["adaptive_draft_length"] = true;
  if (!proposer_endpoint.empty()) {
    j["proposer_endpoint"] = proposer_endpoint;
    j["proposer_budget_ms"] = proposer_budget_ms;
  }
  if (entropy_verification.enabled) {
    j["rejection_sampler_config"] =
        rejection_sampler_config_json(rejection_sample_method == RejectionMethod::kBlock, entropy_verification);
  }
  return j;
}

std::string_view SpeculativeConfig::verification_name() const {
  const bool block = rejection_sample_method == RejectionMethod::kBlock;
  if (entropy_verification.enabled) return block ? "block+entropy" : "entropy";
  return block ? "block" : "standard";
}

namespace {

SpeculationSetting setting_of(const SpeculativeConfig& c) {
  return {std::string(spec_method_name(c.method)), c.num_speculative_tokens};
}

}  // namespace

// The rule itself lives in common/pd_rule so that the router applies it without the engine.
absl::Status validate_for_role(const std::optional<SpeculativeConfig>& c, NodeRole role, bool model_has_recurrent_layers) {
  if (role == NodeRole::kColocated || !c) return absl::OkStatus();
  return check_pd_rule_for_node(role == NodeRole::kPrefill ? PdRole::kPrefill : PdRole::kDecode, setting_of(*c),
                                PdModel{"", model_has_recurrent_layers});
}

absl::Status pd_compatible(const SpeculativeConfig& prefill, const SpeculativeConfig& decode,
                           bool model_has_recurrent_layers) {
  return check_pd_pairing(setting_of(prefill), setting_of(decode), PdModel{"", model_has_recurrent_layers});
}

}  // namespace baton
