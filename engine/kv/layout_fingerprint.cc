#include "engine/kv/layout_fingerprint.h"

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "KV layout fingerprint";

absl::Status missing(const std::string& field) {
  return absl::InvalidArgumentError(str_cat(kWhere, ": `", field, "` is missing or has the wrong type"));
}

template <class T>
absl::Status read(const json& j, const std::string& key, const std::string& where, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return missing(where + key);
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return missing(where + key);
  }
  return absl::OkStatus();
}

// Names the first field where two pools differ, or "" when they are equal.
std::string first_difference(const KvPoolFingerprint& a, const KvPoolFingerprint& b) {
  const auto fmt = [](const std::string& field, const auto& x, const auto& y) {
    return str_cat(field, " ", x, " here vs ", y, " on the peer");
  };
  if (a.model_kind != b.model_kind) return fmt("model", a.model_kind, b.model_kind);
  if (a.model_identity != b.model_identity) {
    return fmt("model identity (config.json hash)", a.model_identity, b.model_identity);
  }
  if (a.weight_dtype != b.weight_dtype) return fmt("weight dtype", a.weight_dtype, b.weight_dtype);
  const KvCacheLayout &x = a.layout, &y = b.layout;
  if (x.num_layers != y.num_layers) return fmt("layers", x.num_layers, y.num_layers);
  if (x.num_kv_heads != y.num_kv_heads) return fmt("KV heads", x.num_kv_heads, y.num_kv_heads);
  if (x.head_dim != y.head_dim) return fmt("head dim", x.head_dim, y.head_dim);
  if (x.block_size != y.block_size) return fmt("block size", x.block_size, y.block_size);
  if (x.dtype != y.dtype) return fmt("KV dtype", dtype_name(x.dtype), dtype_name(y.dtype));
  return "";
}

}  // namespace

json KvLayoutFingerprint::to_json() const {
  json pools_json = json::array();
  for (const KvPoolFingerprint& p : pools) {
    pools_json.push_back({{"name", p.name},
                          {"model_kind", p.model_kind},
                          {"model_identity", p.model_identity},
                          {"weight_dtype", p.weight_dtype},
                          {"layers", p.layout.num_layers},
                          {"kv_heads", p.layout.num_kv_heads},
                          {"head_dim", p.layout.head_dim},
                          {"block_size", p.layout.block_size},
                          {"kv_dtype", std::string(dtype_name(p.layout.dtype))}});
  }
  return {{"version", version}, {"pools", pools_json}, {"recurrent_state_slots", recurrent_state_slots}};
}

std::string KvLayoutFingerprint::serialize() const { return to_json().dump(); }

absl::StatusOr<KvLayoutFingerprint> KvLayoutFingerprint::parse(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(str_cat(kWhere, ": not a JSON object"));
  return from_json(j);
}

absl::StatusOr<KvLayoutFingerprint> KvLayoutFingerprint::from_json(const json& j) {
  KvLayoutFingerprint f;
  BATON_RETURN_IF_ERROR(read(j, "version", "", &f.version));
  if (f.version != kVersion) {
    return absl::InvalidArgumentError(str_cat(kWhere, ": version ", f.version, " (this build reads ", kVersion, ")"));
  }
  BATON_RETURN_IF_ERROR(read(j, "recurrent_state_slots", "", &f.recurrent_state_slots));
  auto pools = j.find("pools");
  if (pools == j.end() || !pools->is_array()) return missing("pools");
  for (std::size_t i = 0; i < pools->size(); ++i) {
    const json& p = (*pools)[i];
    const std::string at = str_cat("pools[", i, "].");
    if (!p.is_object()) return missing(str_cat("pools[", i, "]"));
    KvPoolFingerprint pf;
    std::string kv_dtype;
    BATON_RETURN_IF_ERROR(read(p, "name", at, &pf.name));
    BATON_RETURN_IF_ERROR(read(p, "model_kind", at, &pf.model_kind));
    BATON_RETURN_IF_ERROR(read(p, "model_identity", at, &pf.model_identity));
    BATON_RETURN_IF_ERROR(read(p, "weight_dtype", at, &pf.weight_dtype));
    BATON_RETURN_IF_ERROR(read(p, "layers", at, &pf.layout.num_layers));
    BATON_RETURN_IF_ERROR(read(p, "kv_heads", at, &pf.layout.num_kv_heads));
    BATON_RETURN_IF_ERROR(read(p, "head_dim", at, &pf.layout.head_dim));
    BATON_RETURN_IF_ERROR(read(p, "block_size", at, &pf.layout.block_size));
    BATON_RETURN_IF_ERROR(read(p, "kv_dtype", at, &kv_dtype));
    const std::optional<DType> dt = dtype_from_safetensors(kv_dtype);
    if (!dt) return absl::InvalidArgumentError(str_cat(kWhere, ": `", at, "kv_dtype` is \"", kv_dtype, "\""));
    pf.layout.dtype = *dt;
    f.pools.push_back(std::move(pf));
  }
  return f;
}

absl::Status KvLayoutFingerprint::check_compatible(const KvLayoutFingerprint& peer) const {
  if (recurrent_state_slots != peer.recurrent_state_slots) {
    return absl::FailedPreconditionError(str_cat("KV layouts differ: recurrent-state slots ", recurrent_state_slots,
                                                 " here vs ", peer.recurrent_state_slots,
                                                 " on the peer (1 + num_speculative_tokens: the P/D rule runs the same "
                                                 "k on both nodes of a hybrid model)"));
  }
  for (const KvPoolFingerprint& mine : pools) {
    const KvPoolFingerprint* theirs = nullptr;
    for (const KvPoolFingerprint& p : peer.pools) {
      if (p.name == mine.name) theirs = &p;
    }
    if (theirs == nullptr) {
      return absl::FailedPreconditionError(
          str_cat("KV layouts differ: this engine has a \"", mine.name, "\" pool (", mine.model_kind,
                  ") and the peer has none (different speculative method?)"));
    }
    if (std::string d = first_difference(mine, *theirs); !d.empty()) {
      return absl::FailedPreconditionError(str_cat("KV layouts differ in the \"", mine.name, "\" pool: ", d));
    }
  }
  for (const KvPoolFingerprint& p : peer.pools) {
    bool found = false;
    for (const KvPoolFingerprint& mine : pools) found |= mine.name == p.name;
    if (!found) {
      return absl::FailedPreconditionError(str_cat("KV layouts differ: the peer has a \"", p.name, "\" pool (",
                                                   p.model_kind, ") and this engine has none"));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
