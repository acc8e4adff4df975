// make_proposer: the Proposer a SpeculativeConfig asks for, built with what it needs from the
// target side (its config and weights for heads that share embeddings or the LM head, the backend
// for model-based proposers' own KV caches).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/kv/kv_memory.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/spec/config.h"
#include "engine/spec/proposer.h"
#include "kernels/backend.h"

namespace baton {

struct ProposerContext {
  std::string target_dir;
  const ModelConfig* target_config = nullptr;
  const ModelWeights* target_weights = nullptr;
  Backend* backend = nullptr;
  std::int32_t block_size = 16;
  std::int64_t kv_cache_bytes = 0;  // the target's KV budget (draft caches size themselves from it)
  DType kv_cache_dtype = DType::kF32;  // the target's KV dtype, which draft caches use too
  std::int32_t max_model_len = 0;
  std::int32_t max_num_batched_tokens = 0;
  std::int32_t max_num_seqs = 0;
  std::optional<DType> dtype;       // weight dtype override, applied to draft weights too
  KvMemoryProvider* kv_memory = nullptr;  // the draft pool's memory (null: the backend's)
  std::int32_t graph_max_seqs = 0;        // a draft model's TransformerOptions::graph_max_seqs
};

absl::StatusOr<std::unique_ptr<Proposer>> make_proposer(const SpeculativeConfig& config, const ProposerContext& context);

}  // namespace baton
