#include "node_common/engine_flags.h"

#include "common/status.h"
#include "engine/spec/kv_transfer_config.h"
#include "engine/spec/rejection_sampler_config.h"
#include "nlohmann/json.hpp"
#include "kernels/backend_factory.h"
#include "tokenizer/tokenizer_text_decoder.h"

namespace baton {

const std::vector<FlagSpec>& engine_flags() {
  static const std::vector<FlagSpec> flags = {
      {"model", "DIR", "Hugging Face model directory (config.json + safetensors)"},
      {"speculative-config", "JSON", "speculative decoding, vLLM's keys, e.g. '{\"method\":\"ngram\",\"num_speculative_tokens\":4}'"},
      {"additional-config", "JSON",
       "vLLM Ascend's flag; Baton reads its rejection_sampler_config (e.g. '{\"rejection_sampler_config\": "
       "{\"enable_entropy_verify\": true}}': LOSSY entropy verification), merged into --speculative-config"},
      {"kv-transfer-config", "JSON",
       "vLLM's flag; Baton reads it for extract_hidden_states only: where the files go, e.g. "
       "'{\"kv_connector\":\"ExampleHiddenStatesConnector\",\"kv_role\":\"kv_producer\","
       "\"kv_connector_extra_config\":{\"shared_storage_path\":\"DIR\"}}'"},
      {"dtype", "TYPE", "weight dtype: auto, float32, bfloat16, float16 (default auto = as stored)"},
      {"kv-cache-dtype", "TYPE", "KV cache dtype: auto, float32, bfloat16 (default auto = the activations'; bfloat16 holds twice the tokens)"},
      {"device", "DEV", "where the model runs: cpu (default), cuda or cuda:N"},
      {"threads", "N", "CPU threads (default: all cores)"},
      {"cpu-isa", "ISA", "auto, portable, avx2, avx512, or avx512bf16 (opt-in BF16 dot products; changes results)"},
      {"no-batch-invariant", "", "allow faster kernels whose results depend on the batch"},
      {"kv-cache-memory", "GIB", "KV cache size in GiB (default 1)"},
      {"max-model-len", "N", "longest sequence (default: the model's, capped by the cache)"},
      {"max-num-seqs", "N", "requests running at once (default 64)"},
      {"max-num-batched-tokens", "N", "token budget of one engine step (default 2048)"},
      {"no-enable-prefix-caching", "", "turn the prefix cache off (vLLM's flag; it is on by default, EAGLE and MTP "
                                       "included)"},
      {"graphs", "MODE",
       "replay decode and verification steps from captured graphs: auto (default: on a CUDA device), on, off "
       "(every step op by op, like vLLM's --enforce-eager)"},
      {"graph-max-batch-size", "N", "largest batch (sequences, padded) replayed from a graph (default: min(max-num-seqs, 256))"},
      {"testing-cpu-discrete-memory", "",
       "TESTING ONLY: the CPU backend acts like a GPU whose memory the host cannot read (prefill and decode "
       "nodes then move KV through host mirrors of their pools, as on a GPU)"},
  };
  return flags;
}

absl::StatusOr<EngineConfig> engine_config_from_flags(const ParsedFlags& f, NodeRole role) {
  EngineConfig c;
  c.role = role;
  if (!f.has("model")) return absl::InvalidArgumentError("--model DIR is required");
  c.model_dir = *f.get("model");
  if (auto d = f.get("dtype"); d && *d != "auto") {
    if (*d == "float32") c.dtype = DType::kF32;
    else if (*d == "bfloat16") c.dtype = DType::kBF16;
    else if (*d == "float16") c.dtype = DType::kF16;
    else return absl::InvalidArgumentError(str_cat("--dtype must be auto, float32, bfloat16 or float16, got '", *d, "'"));
  }
  if (auto d = f.get("kv-cache-dtype"); d && *d != "auto") {
    if (*d == "float32") c.kv_cache_dtype = DType::kF32;
    else if (*d == "bfloat16") c.kv_cache_dtype = DType::kBF16;
    else return absl::InvalidArgumentError(str_cat("--kv-cache-dtype must be auto, float32 or bfloat16, got '", *d, "'"));
  }
  if (auto dev = f.get("device")) {
    auto device = parse_device(*dev);
    if (!device.ok()) return absl::InvalidArgumentError(str_cat("--device: ", device.status().message()));
    c.backend.device = *device;
  }
  BATON_ASSIGN_OR_RETURN(auto threads, f.get_int("threads"));
  if (threads) c.backend.num_threads = static_cast<int>(*threads);
  if (auto isa = f.get("cpu-isa")) c.backend.cpu_isa = *isa;
  c.backend.batch_invariant = !f.has("no-batch-invariant");
  c.backend.cpu_discrete_memory = f.has("testing-cpu-discrete-memory");
  if (auto g = f.get("graphs")) {
    if (*g == "auto") c.graphs = GraphMode::kAuto;
    else if (*g == "on") c.graphs = GraphMode::kOn;
    else if (*g == "off") c.graphs = GraphMode::kOff;
    else return absl::InvalidArgumentError(str_cat("--graphs must be auto, on or off, got '", *g, "'"));
  }
  BATON_ASSIGN_OR_RETURN(auto graph_max, f.get_int("graph-max-batch-size"));
  if (graph_max) {
    if (*graph_max < 1) return absl::InvalidArgumentError("--graph-max-batch-size must be at least 1");
    c.graph_max_batch_size = static_cast<std::int32_t>(*graph_max);
  }
  BATON_ASSIGN_OR_RETURN(auto gib, f.get_double("kv-cache-memory"));
  if (gib) {
    if (!(*gib > 0)) return absl::InvalidArgumentError("--kv-cache-memory must be positive");
    c.kv_cache_bytes = static_cast<std::int64_t>(*gib * (1LL << 30));
  }
  BATON_ASSIGN_OR_RETURN(auto max_len, f.get_int("max-model-len"));
  if (max_len) c.max_model_len = static_cast<std::int32_t>(*max_len);
  BATON_ASSIGN_OR_RETURN(auto max_seqs, f.get_int("max-num-seqs"));
  if (max_seqs) c.scheduler.max_num_seqs = static_cast<std::int32_t>(*max_seqs);
  BATON_ASSIGN_OR_RETURN(auto max_tokens, f.get_int("max-num-batched-tokens"));
  if (max_tokens) c.scheduler.max_num_batched_tokens = static_cast<std::int32_t>(*max_tokens);
  c.scheduler.enable_prefix_caching = !f.has("no-enable-prefix-caching");
  std::optional<std::string> spec = f.get("speculative-config");
  if (auto additional = f.get("additional-config")) {
    // Merged into the speculative config's object (malformed speculative JSON is left for
    // SpeculativeConfig::parse to report).
    nlohmann::json merged;
    if (spec) merged = nlohmann::json::parse(*spec, nullptr, /*allow_exceptions=*/false);
    if (!spec || merged.is_object()) {
      BATON_RETURN_IF_ERROR(merge_additional_config(*additional, spec ? &merged : nullptr));
      if (spec) spec = merged.dump();
    }
  }
  if (spec) {
    // The P/D rule's hybrid branch needs to know the model (an unreadable config is the engine's
    // to report, with its reason).
    auto model = ModelConfig::load(c.model_dir);
    auto parsed = SpeculativeConfig::parse(*spec, role, model.ok() && model->has_recurrent_layers);
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(), str_cat("--speculative-config: ", parsed.status().message()));
    }
    c.speculative = std::move(*parsed);
  }
  if (auto kv = f.get("kv-transfer-config")) {
    BATON_ASSIGN_OR_RETURN(std::string dir, parse_kv_transfer_config(*kv));
    if (!c.speculative || c.speculative->method != SpecMethod::kExtractHiddenStates) {
      return absl::InvalidArgumentError(
          "--kv-transfer-config: Baton reads it for --speculative-config method extract_hidden_states only (its nodes "
          "move KV by themselves)");
    }
    c.speculative->hidden_states_dir = std::move(dir);
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_if_present(const std::string& model_dir) {
  if (!Tokenizer::has_tokenizer_files(model_dir)) return std::unique_ptr<Tokenizer>();
  return Tokenizer::load(model_dir);
}

void attach_tokenizer(Engine& engine, const Tokenizer& tokenizer) {
  const Tokenizer* tok = &tokenizer;
  engine.set_text_decoder_factory([tok] { return std::make_unique<TokenizerTextDecoder>(*tok, true); });
  engine.set_token_bytes(tokenizer.token_bytes());
}

}  // namespace baton
