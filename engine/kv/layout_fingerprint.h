// KvLayoutFingerprint: what must agree between two engines before KV bytes move from one to the
// other — per KV pool (the target's, and the draft side's: a draft model or an EAGLE/MTP head),
// which model writes it (config identity and weight dtype) and its memory layout (layers, KV
// heads, head dim, block size, KV dtype), plus the recurrent-state slots of hybrid models.
//
// Small and serializable (JSON) so nodes can exchange it in their Info/Reserve messages; two
// fingerprints are compatible only if equal, and check_compatible() names the first difference.
// It describes layouts only; it never touches KV memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_cache.h"
#include "nlohmann/json_fwd.hpp"

namespace baton {

struct KvPoolFingerprint {
  std::string name;              // "target", "draft"
  std::string model_kind;        // e.g. "LlamaForCausalLM", "eagle3 head"
  std::uint64_t model_identity = 0;  // ModelConfig::identity of the model writing this pool
  std::string weight_dtype;      // dtype of its weight matrices, e.g. "bf16"
  KvCacheLayout layout;          // num_blocks is not part of it: pools may differ in size
  friend bool operator==(const KvPoolFingerprint&, const KvPoolFingerprint&) = default;
};

struct KvLayoutFingerprint {
  static constexpr std::int32_t kVersion = 1;
  std::int32_t version = kVersion;
  std::vector<KvPoolFingerprint> pools;  // "target" first
  std::int32_t recurrent_state_slots = 0;  // 1 + k per request for hybrid recurrent models; 0 otherwise

  nlohmann::json to_json() const;
  std::string serialize() const;  // compact JSON
  // InvalidArgument naming the field when the text is not a fingerprint.
  static absl::StatusOr<KvLayoutFingerprint> parse(std::string_view text);
  static absl::StatusOr<KvLayoutFingerprint> from_json(const nlohmann::json& j);

  // OK when KV written under `peer` can be read under this one; otherwise FailedPrecondition
  // naming the pool and field that differ, with both values.
  absl::Status check_compatible(const KvLayoutFingerprint& peer) const;
  friend bool operator==(const KvLayoutFingerprint&, const KvLayoutFingerprint&) = default;
};

}  // namespace baton
