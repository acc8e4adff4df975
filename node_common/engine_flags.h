// The engine's command-line flags, shared by `baton generate` and the node binaries
// (baton-prefill, baton-decode): model, dtype, CPU threads and ISA, KV-cache size, scheduler
// limits and the speculative config, turned into an EngineConfig for a node role (the P/D rule is
// checked there, at start-up). Also the tokenizer wiring every engine owner repeats.
//
// Must not: read anything but the flags and (for the tokenizer) the model directory.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace baton {

// --model, --speculative-config, --dtype, --threads, --cpu-isa, --no-batch-invariant,
// --kv-cache-memory, --max-model-len, --max-num-seqs, --max-num-batched-tokens.
const std::vector<FlagSpec>& engine_flags();

// An EngineConfig for `role`; errors name the flag. The speculative config is validated for the
// role (its message names both values, the model kind and the rule).
absl::StatusOr<EngineConfig> engine_config_from_flags(const ParsedFlags& f, NodeRole role);

// The model directory's tokenizer, or nullptr when it has no tokenizer files (token-id mode).
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_if_present(const std::string& model_dir);

// Streams text and matches stop strings with `tokenizer` (which must outlive the engine), and gives
// the engine the tokens' bytes that constrained output (response_format) masks with.
void attach_tokenizer(Engine& engine, const Tokenizer& tokenizer);

}  // namespace baton
