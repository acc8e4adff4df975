// Engine: the model runtime's public API — add_request / step / abort over one model, its KV
// cache, the scheduler and the sampler. One step = schedule, one batched forward, sample, check
// stops, report what each request gained.
//
// The engine never sees networking, tokenizers or text formats: text comes in through an
// optional TextDecoderFactory (for stop strings and streamed text). Not thread-safe: one thread
// owns an Engine (the node binaries put it behind their own loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/transformer.h"
#include "engine/request.h"
#include "engine/sample/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec/config.h"
#include "engine/spec/speculator.h"
#include "kernels/backend.h"

namespace baton {

struct EngineConfig {
  std::string model_dir;
  std::optional<DType> dtype;          // weight dtype override; nullopt: as stored
  BackendOptions backend;
  std::int32_t block_size = 16;
  std::int64_t kv_cache_bytes = 1LL << 30;
  std::int32_t max_model_len = 0;      // 0: the model's max_position_embeddings, capped by the cache
  SchedulerConfig scheduler;
  std::uint64_t seed = 0;              // seeds the streams of requests that bring no seed
  std::optional<SpeculativeConfig> speculative;  // nullopt: no speculative decoding
};

using TextDecoderFactory = std::function<std::unique_ptr<TextDecoder>()>;

struct TokenOutput {
  std::int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // when the request asked for logprobs
};

// What one request gained in one step.
struct RequestOutput {
  std::string request_id;
  std::vector<TokenOutput> new_tokens;
  std::string new_text;  // newly visible text (with a TextDecoderFactory)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<std::int32_t> stop_token;
  std::optional<std::string> stop_string;
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_cached_prompt_tokens = 0;
  std::int32_t num_output_tokens = 0;
};

// Counters since the engine started (for metrics and the CLI's speed report).
struct EngineStats {
  std::int64_t steps = 0;
  std::int64_t prompt_tokens_computed = 0;  // prefill work (prompt tokens, excluding cache hits)
  std::int64_t output_tokens = 0;
  std::int64_t preemptions = 0;
  std::int64_t prefix_cache_queries = 0;
  std::int64_t prefix_cache_hits = 0;       // in blocks
  double forward_seconds = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> create(const EngineConfig& config);

  // Validates and queues a request. Errors name the field (InvalidArgument) or say the request can
  // never fit (e.g. longer than max_model_len); the engine is unchanged on error.
  absl::Status add_request(const std::string& id, std::vector<std::int32_t> prompt, const SamplingParams& params);
  // One scheduling step. Returns the requests that gained tokens or finished.
  absl::StatusOr<std::vector<RequestOutput>> step();
  // Finishes a request (reason abort) and frees its blocks; unknown ids are ignored.
  void abort(const std::string& id);

  bool has_unfinished() const { return scheduler_->has_work(); }
  void set_text_decoder_factory(TextDecoderFactory factory) { decoder_factory_ = std::move(factory); }

  const ModelConfig& model_config() const { return model_->config(); }
  const Transformer& model() const { return *model_; }
  std::int32_t max_model_len() const { return max_model_len_; }
  const EngineStats& stats() const { return stats_; }
  const KvBlockPool& block_pool() const { return *pool_; }
  // Speculative decoding counters; nullptr when the engine runs without speculation.
  const SpecDecodeStats* spec_stats() const { return speculator_ ? &speculator_->stats() : nullptr; }
  std::string describe() const;

 private:
  Engine() = default;
  RequestOutput& output_for(Request* r, std::vector<RequestOutput>& outs, std::unordered_map<Request*, std::size_t>& index);
  // Appends tokens one by one, stopping at the first that finishes the request; returns how many
  // were appended.
  std::size_t append_tokens(Request* r, std::span<const std::int32_t> tokens, std::span<const SampleResult> logprobs,
                            RequestOutput& o);
  void finish(Request* r, FinishReason reason);
  void register_final_blocks(Request* r);
  absl::Status speculate(const std::vector<Request*>& decoding);

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvBlockPool> pool_;
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  std::mt19937_64 seed_source_{0};  // streams for requests without a seed
  std::int32_t max_model_len_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  TextDecoderFactory decoder_factory_;
  EngineStats stats_;
  std::unique_ptr<Speculator> speculator_;
  std::uint64_t next_key_ = 1;
  std::vector<std::vector<std::int32_t>> logits_indices_;  // reused per step
  std::vector<std::vector<std::int32_t>> verify_tokens_;   // pending token + drafts, per chunk
  std::vector<float> host_logits_;
  std::vector<float> host_states_;
};

}  // namespace baton
