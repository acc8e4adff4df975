#include "engine/engine.h"

#include <chrono>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton {

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = config;
  BATON_ASSIGN_OR_RETURN(e->backend_, make_cpu_backend(config.backend));
  BATON_ASSIGN_OR_RETURN(const ModelConfig model_config, ModelConfig::load(config.model_dir));
  BATON_ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::open(config.model_dir));
  WeightLoadOptions wo;
  wo.dtype = config.dtype;
  BATON_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::load(model_config, checkpoint, *e->backend_, wo));

  KvCacheLayout layout;
  layout.num_layers = model_config.num_layers;
  layout.num_kv_heads = model_config.num_kv_heads;
  layout.head_dim = model_config.head_dim;
  layout.block_size = config.block_size;
  layout.dtype = e->backend_->activation_dtype();
  const std::int32_t num_blocks = KvCache::blocks_for_budget(layout, config.kv_cache_bytes);
  BATON_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*e->backend_, layout, num_blocks));
  e->cache_ = std::make_unique<KvCache>(std::move(cache));

  const std::int32_t cache_tokens = num_blocks * config.block_size;
  std::int32_t max_len = config.max_model_len > 0 ? config.max_model_len : model_config.max_position_embeddings;
  if (config.max_model_len > 0 && config.max_model_len > model_config.max_position_embeddings) {
    return absl::InvalidArgumentError(str_cat("max_model_len ", config.max_model_len, " exceeds the model's max_position_embeddings (",
                                              model_config.max_position_embeddings, ")"));
  }
  if (max_len > cache_tokens) {
    if (config.max_model_len > 0) {
      return absl::ResourceExhaustedError(str_cat("max_model_len ", max_len, " needs ", max_len, " KV tokens but the cache (",
                                                  config.kv_cache_bytes, " bytes) holds ", cache_tokens,
                                                  "; raise the KV cache memory or lower max_model_len"));
    }
    max_len = cache_tokens;  // the default adapts to the cache
  }
  e->max_model_len_ = max_len;

  SchedulerConfig sc = config.scheduler;
  if (sc.max_num_batched_tokens <= 0 || sc.max_num_seqs <= 0) {
    return absl::InvalidArgumentError("max_num_batched_tokens and max_num_seqs must be positive");
  }
  if (!sc.enable_chunked_prefill && sc.max_num_batched_tokens < max_len) {
    return absl::InvalidArgumentError(str_cat("without chunked prefill max_num_batched_tokens (", sc.max_num_batched_tokens,
                                              ") must be at least max_model_len (", max_len, ")"));
  }
  TransformerOptions to;
  to.max_num_tokens = sc.max_num_batched_tokens;
  to.max_num_seqs = sc.max_num_seqs;
  to.max_num_logits = sc.max_num_seqs;
  to.max_model_len = max_len;
  to.block_size = config.block_size;
  BATON_ASSIGN_OR_RETURN(e->model_, Transformer::create(*e->backend_, model_config, std::move(weights), to));
  e->pool_ = std::make_unique<KvBlockPool>(num_blocks, config.block_size);
  e->scheduler_ = std::make_unique<Scheduler>(sc, *e->pool_);
  e->seed_source_.seed(config.seed);
  spdlog::info("engine: {}", e->describe());
  return e;
}

std::string Engine::describe() const {
  const ModelConfig& c = model_->config();
  return str_cat(c.architecture_name, " (", c.num_layers, " layers, hidden ", c.hidden_size, ", ",
                 model_->weights().matrix_dtype(), " weights) on ", backend_->describe(), "; KV cache ",
                 cache_->num_blocks(), " blocks of ", config_.block_size, " tokens; max_model_len ", max_model_len_);
}

absl::Status Engine::add_request(const std::string& id, std::vector<std::int32_t> prompt, const SamplingParams& params) {
  if (requests_.contains(id)) return absl::AlreadyExistsError(str_cat("request id '", id, "' is already in use"));
  const ModelConfig& c = model_->config();
  BATON_RETURN_IF_ERROR(params.validate(c.vocab_size));
  if (prompt.empty()) return absl::InvalidArgumentError(str_cat("request '", id, "': prompt is empty"));
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(str_cat("request '", id, "': prompt token ", i, " is ", prompt[i],
                                                ", outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  const std::int64_t total = static_cast<std::int64_t>(prompt.size()) + params.max_tokens;
  if (total > max_model_len_) {
    return absl::InvalidArgumentError(str_cat("request '", id, "': prompt (", prompt.size(), " tokens) + max_tokens (",
                                              params.max_tokens, ") exceeds max_model_len ", max_model_len_));
  }
  if (!params.stop.empty() && !decoder_factory_) {
    return absl::InvalidArgumentError(str_cat("request '", id, "': stop strings need a tokenizer, and this model has none"));
  }
  const std::uint64_t seed = params.seed.has_value() ? *params.seed : seed_source_();
  auto r = std::make_unique<Request>(id, std::move(prompt), params, seed, config_.block_size);
  if (decoder_factory_) r->decoder = decoder_factory_();
  r->stop_checker = std::make_unique<StopChecker>(r->params, c.eos_token_ids, r->decoder.get());
  scheduler_->add(r.get());
  requests_.emplace(id, std::move(r));
  return absl::OkStatus();
}

void Engine::abort(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  scheduler_->remove(it->second.get());
  requests_.erase(it);
}

RequestOutput& Engine::output_for(Request* r, std::vector<RequestOutput>& outs,
                                  std::unordered_map<Request*, std::size_t>& index) {
  auto [it, inserted] = index.emplace(r, outs.size());
  if (inserted) {
    outs.emplace_back();
    outs.back().request_id = r->id;
  }
  return outs[it->second];
}

void Engine::finish(Request* r, FinishReason reason) {
  r->state = RequestState::kFinished;
  r->finish_reason = reason;
  scheduler_->remove(r);
}

absl::StatusOr<std::vector<RequestOutput>> Engine::step() {
  std::vector<RequestOutput> outs;
  const SchedulerOutput plan = scheduler_->schedule();
  stats_.preemptions += static_cast<std::int64_t>(plan.preempted.size());
  if (plan.empty()) return outs;
  ++stats_.steps;

  ForwardBatch batch;
  logits_indices_.resize(plan.chunks.size());
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    logits_indices_[i].clear();
    if (c.samples) logits_indices_[i].push_back(c.num_tokens - 1);
    ForwardSequence s;
    s.tokens = std::span<const std::int32_t>(c.request->tokens).subspan(static_cast<std::size_t>(c.start),
                                                                        static_cast<std::size_t>(c.num_tokens));
    s.start_position = c.start;
    s.block_table = c.request->blocks.blocks();
    s.logits_indices = logits_indices_[i];
    batch.sequences.push_back(s);
    stats_.prompt_tokens_computed += std::max(0, std::min(c.start + c.num_tokens, c.request->prompt_len) - c.start);
  }
  const auto t0 = std::chrono::steady_clock::now();
  BATON_ASSIGN_OR_RETURN(ForwardOutput fwd, model_->forward(batch, *cache_));
  const std::int32_t vocab = model_->config().vocab_size;
  host_logits_.resize(static_cast<std::size_t>(fwd.logits.numel()));
  backend_->copy_to_host(host_logits_.data(), fwd.logits.data, host_logits_.size() * sizeof(float));
  stats_.forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::unordered_map<Request*, std::size_t> index;
  std::size_t logits_row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Request* r = c.request;
    r->num_computed = c.start + c.num_tokens;
    if (!c.samples) continue;
    const std::span<const float> row(host_logits_.data() + logits_row * static_cast<std::size_t>(vocab),
                                     static_cast<std::size_t>(vocab));
    ++logits_row;
    const SampleResult s = sampler_.sample(row, r->params, TokenHistory{r->prompt(), r->output()},
                                           model_->config().eos_token_ids, r->rng);
    r->tokens.push_back(s.token);
    ++stats_.output_tokens;
    if (r->num_output() == 1) r->first_token_time = std::chrono::steady_clock::now();
    // Blocks whose tokens all have KV are final: share them through the prefix cache.
    if (scheduler_->config().enable_prefix_caching) {
      r->blocks.register_full_blocks(*pool_, std::span<const std::int32_t>(r->tokens).first(static_cast<std::size_t>(r->num_computed)));
    }
    RequestOutput& o = output_for(r, outs, index);
    TokenOutput t{s.token, s.logprob, {}};
    if (r->params.logprobs >= 0) t.top_logprobs = s.top;
    o.new_tokens.push_back(std::move(t));
    const StopDecision d = r->stop_checker->check(r->output());
    if (d.visible_text.size() > r->text_sent) {
      o.new_text += d.visible_text.substr(r->text_sent);
      r->text_sent = d.visible_text.size();
    }
    if (d.reason != FinishReason::kNone) {
      o.finished = true;
      o.finish_reason = d.reason;
      o.stop_token = d.stop_token;
      o.stop_string = d.stop_string;
      finish(r, d.reason);
    }
    o.num_prompt_tokens = r->prompt_len;
    o.num_cached_prompt_tokens = r->num_cached_prompt;
    o.num_output_tokens = r->num_output();
  }
  stats_.prefix_cache_queries = pool_->prefix_queries();
  stats_.prefix_cache_hits = pool_->prefix_hits();
  // Finished requests leave the engine once reported.
  for (const RequestOutput& o : outs) {
    if (o.finished) requests_.erase(o.request_id);
  }
  return outs;
}

}  // namespace baton
