#include "engine/engine.h"

#include <chrono>

#include "common/status.h"
#include "engine/spec/proposer_factory.h"
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
  const std::int32_t k = config.speculative ? std::max(0, config.speculative->num_speculative_tokens) : 0;
  TransformerOptions to;
  to.max_num_tokens = sc.max_num_batched_tokens;
  to.max_num_seqs = sc.max_num_seqs;
  // A verifying request needs logits at its pending token and at each draft.
  to.max_num_logits = std::min(sc.max_num_batched_tokens, sc.max_num_seqs * (k + 1));
  to.max_model_len = max_len;
  to.block_size = config.block_size;
  BATON_ASSIGN_OR_RETURN(e->model_, Transformer::create(*e->backend_, model_config, std::move(weights), to));
  e->pool_ = std::make_unique<KvBlockPool>(num_blocks, config.block_size);
  if (config.speculative) {
    ProposerContext pc;
    pc.target_dir = config.model_dir;
    pc.target_config = &e->model_->config();
    pc.target_weights = &e->model_->weights();
    pc.backend = e->backend_.get();
    pc.block_size = config.block_size;
    pc.kv_cache_bytes = config.kv_cache_bytes;
    pc.max_model_len = max_len;
    pc.max_num_batched_tokens = sc.max_num_batched_tokens;
    pc.max_num_seqs = sc.max_num_seqs;
    pc.dtype = config.dtype;
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Proposer> proposer, make_proposer(*config.speculative, pc));
    e->speculator_ = std::make_unique<Speculator>(*config.speculative, std::move(proposer), model_config.vocab_size,
                                                  model_config.eos_token_ids);
    const TargetStateSpec states = e->speculator_->target_states();
    if (sc.enable_prefix_caching && (!states.layer_inputs.empty() || states.final_hidden)) {
      // A prefix-cache hit skips the target forward over those positions, but EAGLE/MTP heads need
      // the target's hidden state at every position. Until the heads' KV lives in the target's
      // block tables (and is shared with the prefix), the two do not mix. Info, not a warning: prefix
      // caching is on by default, so the user asked for nothing that is being refused.
      spdlog::info("prefix caching is off: the {} proposer needs the target's hidden states of every prompt position",
                   spec_method_name(config.speculative->method));
      sc.enable_prefix_caching = false;
    }
  }
  e->scheduler_ = std::make_unique<Scheduler>(sc, *e->pool_);
  e->seed_source_.seed(config.seed);
  spdlog::info("engine: {}", e->describe());
  return e;
}

std::string Engine::describe() const {
  const ModelConfig& c = model_->config();
  std::string spec = "no speculative decoding";
  if (speculator_) {
    spec = str_cat("speculative ", spec_method_name(speculator_->config().method), " k=",
                   speculator_->config().num_speculative_tokens);
  }
  return str_cat(c.architecture_name, " (", c.num_layers, " layers, hidden ", c.hidden_size, ", ",
                 model_->weights().matrix_dtype(), " weights) on ", backend_->describe(), "; KV cache ",
                 cache_->num_blocks(), " blocks of ", config_.block_size, " tokens; max_model_len ", max_model_len_,
                 "; ", spec);
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
  auto r = std::make_unique<Request>(next_key_++, id, std::move(prompt), params, seed, config_.block_size);
  if (decoder_factory_) r->decoder = decoder_factory_();
  r->stop_checker = std::make_unique<StopChecker>(r->params, c.eos_token_ids, r->decoder.get());
  if (speculator_) speculator_->add_request(*r);
  scheduler_->add(r.get());
  requests_.emplace(id, std::move(r));
  return absl::OkStatus();
}

void Engine::abort(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  scheduler_->remove(it->second.get());
  if (speculator_) speculator_->remove_request(*it->second, /*finished=*/false);
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

void Engine::register_final_blocks(Request* r) {
  if (!scheduler_->config().enable_prefix_caching) return;
  // Blocks whose tokens all have KV are final: share them through the prefix cache.
  const auto n = std::min(static_cast<std::size_t>(r->num_computed), r->tokens.size());
  r->blocks.register_full_blocks(*pool_, std::span<const std::int32_t>(r->tokens).first(n));
}

void Engine::finish(Request* r, FinishReason reason) {
  register_final_blocks(r);
  r->state = RequestState::kFinished;
  r->finish_reason = reason;
  scheduler_->remove(r);
  if (speculator_) speculator_->remove_request(*r, /*finished=*/reason != FinishReason::kAbort);
}

std::size_t Engine::append_tokens(Request* r, std::span<const std::int32_t> tokens,
                                  std::span<const SampleResult> logprobs, RequestOutput& o) {
  std::size_t appended = 0;
  for (std::size_t i = 0; i < tokens.size() && !r->finished(); ++i) {
    r->tokens.push_back(tokens[i]);
    ++appended;
    ++stats_.output_tokens;
    if (r->num_output() == 1) r->first_token_time = std::chrono::steady_clock::now();
    TokenOutput t{tokens[i], 0.0f, {}};
    if (r->params.logprobs >= 0 && i < logprobs.size()) {
      t.logprob = logprobs[i].logprob;
      t.top_logprobs = logprobs[i].top;
    }
    o.new_tokens.push_back(std::move(t));
    const StopDecision d = r->stop_checker->check(r->output());
    if (d.visible_len > r->text_sent) {
      o.new_text += r->stop_checker->text().substr(r->text_sent, d.visible_len - r->text_sent);
      r->text_sent = d.visible_len;
    }
    if (d.reason != FinishReason::kNone) {
      o.finished = true;
      o.finish_reason = d.reason;
      o.stop_token = d.stop_token;
      o.stop_string = d.stop_string;
      finish(r, d.reason);
    }
  }
  o.num_prompt_tokens = r->prompt_len;
  o.num_cached_prompt_tokens = r->num_cached_prompt;
  o.num_output_tokens = r->num_output();
  return appended;
}

absl::Status Engine::speculate(const std::vector<Request*>& decoding) {
  if (!speculator_ || decoding.empty()) return absl::OkStatus();
  return speculator_->propose(decoding, max_model_len_);
}

absl::StatusOr<std::vector<RequestOutput>> Engine::step() {
  std::vector<RequestOutput> outs;
  const SchedulerOutput plan = scheduler_->schedule();
  stats_.preemptions += static_cast<std::int64_t>(plan.preempted.size());
  if (plan.empty()) return outs;
  ++stats_.steps;

  ForwardBatch batch;
  logits_indices_.resize(plan.chunks.size());
  verify_tokens_.resize(plan.chunks.size());
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    Request* r = c.request;
    ForwardSequence s;
    logits_indices_[i].clear();
    if (c.num_drafts > 0) {
      // Verification: the pending token and the drafts, with logits at every one of them.
      verify_tokens_[i].assign(1, r->tokens[static_cast<std::size_t>(c.start)]);
      verify_tokens_[i].insert(verify_tokens_[i].end(), r->drafts.begin(), r->drafts.end());
      for (std::int32_t j = 0; j <= c.num_drafts; ++j) logits_indices_[i].push_back(j);
      s.tokens = verify_tokens_[i];
    } else {
      if (c.samples) logits_indices_[i].push_back(c.num_tokens - 1);
      s.tokens = std::span<const std::int32_t>(r->tokens).subspan(static_cast<std::size_t>(c.start),
                                                                  static_cast<std::size_t>(c.num_tokens));
    }
    s.start_position = c.start;
    s.block_table = r->blocks.blocks();
    s.logits_indices = logits_indices_[i];
    batch.sequences.push_back(s);
    stats_.prompt_tokens_computed += std::max(0, std::min(c.start + c.num_tokens, r->prompt_len) - c.start);
  }
  const TargetStateSpec states = speculator_ ? speculator_->target_states() : TargetStateSpec{};
  batch.capture_layer_inputs = states.layer_inputs;
  batch.capture_final_hidden = states.final_hidden;

  const auto t0 = std::chrono::steady_clock::now();
  BATON_ASSIGN_OR_RETURN(ForwardOutput fwd, model_->forward(batch, *cache_));
  const std::int32_t vocab = model_->config().vocab_size;
  host_logits_.resize(static_cast<std::size_t>(fwd.logits.numel()));
  backend_->copy_to_host(host_logits_.data(), fwd.logits.data, host_logits_.size() * sizeof(float));
  // Captured states, interleaved per token as the proposer wants them: [tokens, width].
  const std::int32_t hidden = model_->config().hidden_size;
  const std::int32_t width = states.width(hidden);
  if (width > 0) {
    const auto num_tokens = static_cast<std::size_t>(batch.num_tokens());
    host_states_.resize(num_tokens * static_cast<std::size_t>(width));
    std::vector<TensorView> views = fwd.layer_inputs;
    if (states.final_hidden) views.push_back(fwd.final_hidden);
    for (std::size_t v = 0; v < views.size(); ++v) {
      for (std::size_t t = 0; t < num_tokens; ++t) {
        backend_->copy_to_host(host_states_.data() + t * static_cast<std::size_t>(width) + v * static_cast<std::size_t>(hidden),
                               views[v].ptr<const float>() + t * static_cast<std::size_t>(hidden),
                               static_cast<std::size_t>(hidden) * sizeof(float));
      }
    }
  }
  stats_.forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::unordered_map<Request*, std::size_t> index;
  std::vector<Request*> decoding;
  std::size_t logits_row = 0, token_row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Request* r = c.request;
    const auto rows = width > 0 ? std::span<const float>(host_states_).subspan(token_row * static_cast<std::size_t>(width),
                                                                                static_cast<std::size_t>(c.num_tokens) *
                                                                                    static_cast<std::size_t>(width))
                                : std::span<const float>();
    token_row += static_cast<std::size_t>(c.num_tokens);
    if (!c.samples) {
      r->num_computed = c.start + c.num_tokens;
      if (speculator_) speculator_->observe(*r, c.start, rows, c.num_tokens, c.num_tokens);
      continue;
    }
    const auto v = static_cast<std::size_t>(vocab);
    RequestOutput& o = output_for(r, outs, index);
    if (c.num_drafts > 0) {
      const std::span<const float> logits(host_logits_.data() + logits_row * v, static_cast<std::size_t>(c.num_drafts + 1) * v);
      logits_row += static_cast<std::size_t>(c.num_drafts + 1);
      const VerifiedTokens verified = speculator_->verify(*r, logits);
      // KV is valid for the pending token and the accepted drafts; the rest is rolled back.
      r->num_computed = c.start + 1 + verified.num_accepted;
      r->blocks.shrink_to(*pool_, r->num_computed);
      speculator_->observe(*r, c.start, rows, c.num_tokens, 1 + verified.num_accepted);
      append_tokens(r, verified.tokens, verified.logprobs, o);
    } else {
      const std::span<const float> row(host_logits_.data() + logits_row * v, v);
      ++logits_row;
      r->num_computed = c.start + c.num_tokens;
      if (speculator_) speculator_->observe(*r, c.start, rows, c.num_tokens, c.num_tokens);
      const SampleResult s = sampler_.sample(row, r->params, TokenHistory{r->prompt(), r->output()},
                                             model_->config().eos_token_ids, r->rng);
      append_tokens(r, std::span<const std::int32_t>(&s.token, 1), std::span<const SampleResult>(&s, 1), o);
    }
    if (!r->finished()) {
      register_final_blocks(r);
      if (r->decoding()) decoding.push_back(r);
    }
  }
  BATON_RETURN_IF_ERROR(speculate(decoding));
  stats_.prefix_cache_queries = pool_->prefix_queries();
  stats_.prefix_cache_hits = pool_->prefix_hits();
  // Finished requests leave the engine once reported.
  for (const RequestOutput& o : outs) {
    if (o.finished) requests_.erase(o.request_id);
  }
  return outs;
}

}  // namespace baton
