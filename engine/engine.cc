// The Engine's life cycle and step. The prefill/decode hand-off (reserve, commit, release, leases,
// pools and fingerprint) is in engine_handoff.cc.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/status.h"
#include "engine/spec/proposer_factory.h"
#include "kernels/backend_factory.h"
#include "kernels/step_profile.h"
#include "spdlog/spdlog.h"

namespace baton {

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config, EngineHooks hooks) {
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = config;
  e->hooks_ = std::move(hooks);
  BATON_ASSIGN_OR_RETURN(e->backend_, make_backend(config.backend));
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
  BATON_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*e->backend_, layout, num_blocks, config.kv_memory.get(), "target"));
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
  // Drafts per verification, for sizing the logits buffer. MTP's default (one per MTP layer) is
  // known only once its head is loaded, after the model: size for up to kMaxDefaultDrafts then
  // (published MTP checkpoints have 1 to 3 layers), and check below.
  constexpr std::int32_t kMaxDefaultDrafts = 8;
  std::int32_t k_sized = 0;
  if (config.speculative) {
    k_sized = config.speculative->num_speculative_tokens > 0 ? config.speculative->num_speculative_tokens
                                                             : kMaxDefaultDrafts;
  }
  TransformerOptions to;
  to.max_num_tokens = sc.max_num_batched_tokens;
  to.max_num_seqs = sc.max_num_seqs;
  to.max_model_len = max_len;
  to.block_size = config.block_size;
  // A verifying request needs logits at its pending token and at each draft.
  to.max_num_logits = std::min(sc.max_num_batched_tokens, sc.max_num_seqs * (k_sized + 1));
  BATON_ASSIGN_OR_RETURN(e->model_, Transformer::create(*e->backend_, model_config, std::move(weights), to));
  BATON_RETURN_IF_ERROR(e->step_batch_.allocate(*e->backend_, e->model_->options().max_num_logits));
  e->pool_ = std::make_unique<KvBlockPool>(num_blocks, config.block_size);
  if (config.speculative) {
    ProposerContext pc;
    pc.target_dir = config.model_dir;
    pc.target_config = &e->model_->config();
    pc.target_weights = &e->model_->weights();
    pc.backend = e->backend_.get();
    pc.block_size = config.block_size;
    pc.kv_cache_bytes = config.kv_cache_bytes;
    pc.kv_memory = config.kv_memory.get();
    pc.max_model_len = max_len;
    pc.max_num_batched_tokens = sc.max_num_batched_tokens;
    pc.max_num_seqs = sc.max_num_seqs;
    pc.dtype = config.dtype;
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Proposer> proposer, make_proposer(*config.speculative, pc));
    // num_speculative_tokens in effect (MTP's default: one per module), then the P/D rule for this
    // node's role on that value.
    SpeculativeConfig resolved = *config.speculative;
    if (resolved.num_speculative_tokens < 1) {
      const std::optional<std::int32_t> k = proposer->default_num_speculative_tokens();
      if (!k) return absl::InvalidArgumentError("speculative_config: `num_speculative_tokens` is required");
      resolved.num_speculative_tokens = *k;
    }
    BATON_RETURN_IF_ERROR(validate_for_role(resolved, config.role, model_config.has_recurrent_layers));
    if (sc.max_num_batched_tokens < resolved.num_speculative_tokens + 1) {
      return absl::InvalidArgumentError(str_cat("max_num_batched_tokens (", sc.max_num_batched_tokens,
                                                ") must hold a verification of num_speculative_tokens + 1 = ",
                                                resolved.num_speculative_tokens + 1, " tokens"));
    }
    if (to.max_num_logits < std::min(sc.max_num_batched_tokens, sc.max_num_seqs * (resolved.num_speculative_tokens + 1))) {
      return absl::InvalidArgumentError(str_cat("num_speculative_tokens ", resolved.num_speculative_tokens,
                                                " is larger than this engine was sized for"));
    }
    if (e->hooks_.wrap_proposer) proposer = e->hooks_.wrap_proposer(std::move(proposer));
    if (config.testing_broken_rejection_sampler) {
      spdlog::warn("TESTING ONLY: drafts are verified by a deliberately BROKEN rejection sampler; the output is NOT "
                   "the target model's. Never use this outside tests of `baton verify-lossless`.");
    }
    e->speculator_ = std::make_unique<Speculator>(resolved, std::move(proposer), model_config.vocab_size,
                                                  model_config.eos_token_ids, config.testing_broken_rejection_sampler);
    const TargetStateSpec states = e->speculator_->target_states();
    BATON_RETURN_IF_ERROR(e->model_->reserve_captures(states.layer_inputs.size(), states.final_hidden));
    if (sc.enable_prefix_caching && (!states.layer_inputs.empty() || states.final_hidden)) {
      // A prefix-cache hit skips the target forward over those positions, but EAGLE/MTP heads need
      // the target's hidden state at every position. Until the heads' KV lives in the target's
      // block tables (and is shared with the prefix), the two do not mix. Info, not a warning: prefix
      // caching is on by default, so the user asked for nothing that is being refused.
      spdlog::info("prefix caching is off: the {} proposer needs the target's hidden states of every prompt position",
                   spec_method_name(config.speculative->method));
      sc.enable_prefix_caching = false;
    }
  } else if (config.role != NodeRole::kColocated) {
    BATON_RETURN_IF_ERROR(validate_for_role(std::nullopt, config.role, model_config.has_recurrent_layers));
  }
  e->scheduler_ = std::make_unique<Scheduler>(sc, *e->pool_, e->speculator_ != nullptr);
  e->seed_source_.seed(config.seed);
  spdlog::info("engine: {}", e->describe());
  return e;
}

Engine::~Engine() = default;

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
                 "; ", node_role_name(config_.role), " role; ", spec);
}

Request* Engine::find(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

absl::Status Engine::add_request(const std::string& id, std::vector<std::int32_t> prompt, const SamplingParams& params,
                                 const AddRequestOptions& options) {
  if (requests_.contains(id)) return absl::AlreadyExistsError(str_cat("request id '", id, "' is already in use"));
  if (options.prefill_only != (config_.role == NodeRole::kPrefill)) {
    return absl::FailedPreconditionError(
        str_cat("request '", id, "': ", options.prefill_only ? "prefill-only requests need an engine in the prefill role"
                                                              : "an engine in the prefill role takes prefill-only requests"));
  }
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
  auto r = std::make_unique<Request>(next_key_++, id, std::move(prompt), params, seed, config_.block_size, now());
  r->prefill_only = options.prefill_only;
  if (decoder_factory_) r->decoder = decoder_factory_();
  r->stop_checker = std::make_unique<StopChecker>(r->params, c.eos_token_ids, r->decoder.get());
  if (speculator_) speculator_->add_request(*r);
  scheduler_->add(r.get());
  requests_.emplace(id, std::move(r));
  return absl::OkStatus();
}

void Engine::fill_counts(const Request* r, RequestOutput& o) const {
  o.num_prompt_tokens = r->prompt_len;
  o.num_cached_prompt_tokens = r->num_cached_prompt;
  o.num_output_tokens = r->num_output();
  o.spec = r->spec;
  o.arrival_time = r->arrival;
  o.first_token_time = r->first_token_time;
  o.finish_time = r->finish_time;
}

RequestOutput& Engine::output_for(Request* r, std::vector<RequestOutput>& outs) {
  auto [it, inserted] = output_index_.emplace(r, outs.size());
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
  if (reason != FinishReason::kError) register_final_blocks(r);
  r->state = RequestState::kFinished;
  r->finish_reason = reason;
  r->finish_time = now();
  r->drafts.clear();
  r->draft_probs.clear();
  scheduler_->remove(r);
  if (speculator_) {
    speculator_->remove_request(*r, /*finished=*/reason == FinishReason::kStop || reason == FinishReason::kLength);
  }
}

void Engine::fail(Request* r, const absl::Status& why, std::vector<RequestOutput>& outs) {
  if (r->finished()) return;
  spdlog::warn("request '{}' failed and was finished: {}", r->id, why.ToString());
  ++stats_.request_faults;
  r->error = std::string(why.message());
  finish(r, FinishReason::kError);
  RequestOutput& o = output_for(r, outs);
  o.finished = true;
  o.finish_reason = FinishReason::kError;
  o.error = r->error;
  fill_counts(r, o);
}

void Engine::drop(Request* r) {
  auto it = requests_.find(r->id);
  if (it != requests_.end() && it->second.get() == r) requests_.erase(it);
}

std::size_t Engine::append_tokens(Request* r, std::span<const std::int32_t> tokens,
                                  std::span<const SampleResult> logprobs, RequestOutput& o) {
  std::size_t appended = 0;
  for (std::size_t i = 0; i < tokens.size() && !r->finished(); ++i) {
    r->tokens.push_back(tokens[i]);
    ++appended;
    ++stats_.output_tokens;
    if (r->num_output() == 1) first_token_now_.push_back(r);
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
  fill_counts(r, o);
  return appended;
}

void Engine::abort(const std::string& id) {
  Request* r = find(id);
  if (r == nullptr) return;
  if (r->state == RequestState::kPrefilled || r->state == RequestState::kReserved) {
    release_held(r);  // frees the blocks and forgets r
  } else {
    finish(r, FinishReason::kAbort);
  }
  RequestOutput o;
  o.request_id = id;
  o.finished = true;
  o.finish_reason = FinishReason::kAbort;
  if (Request* still = find(id); still == r) {
    r->finish_time = now();
    fill_counts(r, o);
    drop(r);
  }
  pending_outputs_.push_back(std::move(o));
}

void Engine::propose_pending(std::vector<RequestOutput>& outs) {
  if (!speculator_) return;
  std::vector<Request*>& want = want_drafts_;  // reused from step to step
  want.clear();
  for (Request* r : scheduler_->running()) {
    if (r->needs_drafts && r->decoding() && !r->finished()) want.push_back(r);
  }
  if (want.empty()) return;
  for (Request* r : want) r->needs_drafts = false;
  const ProfileScope profile(ProfileClass::kProposer);
  for (const ProposalFailure& f : speculator_->propose(want, max_model_len_)) fail(f.first, f.second, outs);
}

absl::StatusOr<bool> Engine::run_forward(const SchedulerOutput& plan, std::vector<RequestOutput>& outs) {
  const TargetStateSpec states = speculator_ ? speculator_->target_states() : TargetStateSpec{};
  ForwardBatch& batch = step_batch_.build(plan.chunks, states);
  if (speculator_) {
    const ProfileScope profile(ProfileClass::kProposer);
    speculator_->before_target_forward();  // the forward overwrites the last one's captured states
  }
  if (layer_callback_) {
    layer_writes_.clear();
    for (const ScheduledChunk& c : plan.chunks) {
      layer_writes_.push_back(KvLayerWrite{&c.request->id, c.start, c.num_tokens, c.request->blocks.blocks()});
    }
    batch.on_layer_written = [this](std::int32_t layer) { layer_callback_(layer, layer_writes_); };
  }
  for (const ScheduledChunk& c : plan.chunks) {
    stats_.prompt_tokens_computed += std::max(0, std::min(c.start + c.num_tokens, c.request->prompt_len) - c.start);
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<ForwardOutput> fwd = model_->forward(batch, *cache_);
  if (!fwd.ok()) {
    // Pin the failure on the chunks that fail alone; the others run again next step.
    bool culprit = false;
    for (const ScheduledChunk& c : plan.chunks) {
      const ForwardBatch& one = step_batch_.build(std::span<const ScheduledChunk>(&c, 1), states);
      if (absl::StatusOr<ForwardOutput> alone = model_->forward(one, *cache_); !alone.ok()) {
        fail(c.request, alone.status(), outs);
        culprit = true;
      }
    }
    if (!culprit) return fwd.status();
    return false;
  }
  device_picks_.resize(plan.chunks.size());
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) device_picks_[i] = device_pick(plan.chunks[i]);
  step_batch_.fetch(*fwd, *backend_, model_->config().vocab_size, device_picks_);
  stats_.forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  step_batch_.pick_on_device(*fwd, *backend_);
  return true;
}

SampleRowParams Engine::device_pick(const ScheduledChunk& c) const {
  const Request& r = *c.request;
  SampleRowParams p;  // temperature -1: the host samples
  // Logprobs and penalties need the rows on the host, and so do probabilistic drafts (their
  // verification reads p and q) and the deliberately broken verifier. Greedy rows can be picked
  // on every backend; sampled ones where the backend samples.
  const bool host = !(c.samples || c.num_drafts > 0) || r.params.logprobs >= 0 ||
                    Sampler::needs_history(r.params, r.output().size()) || !r.draft_probs.empty() ||
                    (speculator_ && speculator_->broken_for_testing()) ||
                    (!r.params.greedy() && !backend_->samples_rows());
  if (host) return p;
  p.temperature = r.params.greedy() ? 0.0f : r.params.temperature;
  p.top_k = r.params.top_k;
  p.top_p = r.params.top_p;
  p.min_p = r.params.min_p;
  p.seed = r.seed;
  // The first token the chunk decides (the draw plain decoding makes there; random.h).
  p.position = r.num_tokens();
  return p;
}

absl::Status Engine::observe(Request& r, std::int32_t start, const TargetStateRows& rows, std::int32_t num_tokens,
                             std::int32_t num_valid) {
  const ProfileScope profile(ProfileClass::kProposer);  // proposers that read target states work here
  return speculator_->observe(r, start, rows, num_tokens, num_valid);
}

void Engine::process_chunk(const ScheduledChunk& c, std::size_t index, std::vector<RequestOutput>& outs) {
  Request* r = c.request;
  if (r->finished()) return;
  const TargetStateRows rows = step_batch_.states(index);
  if (!c.samples) {
    r->num_computed = c.start + c.num_tokens;
    if (speculator_) {
      if (absl::Status s = observe(*r, c.start, rows, c.num_tokens, c.num_tokens); !s.ok()) {
        fail(r, s, outs);
        return;
      }
      // A recompute after preemption stops at the pending token, which is verified with drafts.
      if (r->decoding()) r->needs_drafts = true;
    }
    return;
  }
  // Tokens picked on the device come as one id per row; other chunks' rows are read here.
  const std::span<const std::int32_t> picks = step_batch_.device_tokens(index);
  const std::span<const float> logits = step_batch_.logits(index);
  bool bad_row = false, no_finite = false;
  if (!picks.empty()) {
    for (const std::int32_t t : picks) {
      bad_row |= t < 0;
      no_finite |= t == kArgmaxNoFinite;
    }
  } else {
    int any_nan = 0;  // a whole-row OR (vectorizes), not a search that branches per entry
    for (const float x : logits) any_nan |= x != x;
    bad_row = any_nan != 0;
  }
  if (bad_row) {
    // Bad KV (e.g. a corrupt transfer) or weights: this request cannot go on; the others can.
    const char* what = no_finite ? "all -inf" : "NaN (or +inf after temperature)";
    fail(r, absl::DataLossError(str_cat("the target's logits are ", what, " at position ", c.start + c.num_tokens - 1,
                                        " (corrupt KV cache contents?)")),
         outs);
    return;
  }
  RequestOutput& o = output_for(r, outs);
  if (c.num_drafts > 0) {
    const VerifiedTokens verified = [&] {
      const ProfileScope profile(ProfileClass::kSampling);
      return picks.empty() ? speculator_->verify(*r, logits) : speculator_->verify_picks(*r, picks);
    }();
    // KV is valid for the pending token and the accepted drafts; the rest is rolled back.
    r->num_computed = c.start + 1 + verified.num_accepted;
    r->blocks.shrink_to(*pool_, r->num_computed);
    if (absl::Status s = observe(*r, c.start, rows, c.num_tokens, 1 + verified.num_accepted); !s.ok()) {
      fail(r, s, outs);
      return;
    }
    append_tokens(r, verified.tokens, verified.logprobs, o);
  } else {
    r->num_computed = c.start + c.num_tokens;
    if (speculator_) {
      if (absl::Status s = observe(*r, c.start, rows, c.num_tokens, c.num_tokens); !s.ok()) {
        fail(r, s, outs);
        return;
      }
    }
    // The draw that decides token num_tokens() (random.h): the same wherever this step runs.
    RandomStream rng = token_stream(r->seed, r->num_tokens());
    const ProfileScope profile(ProfileClass::kSampling);
    const SampleResult s = !picks.empty() ? SampleResult{picks[0], 0.0f, {}}
                                          : sampler_.sample(logits, r->params, TokenHistory{r->prompt(), r->output()},
                                                            model_->config().eos_token_ids, rng);
    append_tokens(r, std::span<const std::int32_t>(&s.token, 1), std::span<const SampleResult>(&s, 1), o);
  }
  if (!r->finished()) {
    register_final_blocks(r);
    if (speculator_ && r->decoding()) r->needs_drafts = true;
  }
}

absl::StatusOr<std::vector<RequestOutput>> Engine::step() {
  std::vector<RequestOutput> outs = std::move(pending_outputs_);
  pending_outputs_.clear();
  output_index_.clear();
  first_token_now_.clear();
  expire_leases(outs);
  // Committed hand-offs take free running slots before anything is proposed or scheduled, so a
  // promoted request is never verified without its drafts.
  scheduler_->promote_ready();
  propose_pending(outs);
  const SchedulerOutput& plan = scheduler_->schedule();
  stats_.preemptions += static_cast<std::int64_t>(plan.preempted.size());
  if (speculator_) {
    for (Request* r : plan.preempted) speculator_->reset_request(*r);
  }
  if (!plan.empty()) {
    ++stats_.steps;
    BATON_ASSIGN_OR_RETURN(const bool ran, run_forward(plan, outs));
    if (ran) {
      for (std::size_t i = 0; i < plan.chunks.size(); ++i) process_chunk(plan.chunks[i], i, outs);
      propose_pending(outs);
      park_prefilled(outs);
    }
  }
  stats_.prefix_cache_queries = pool_->prefix_queries();
  stats_.prefix_cache_hits = pool_->prefix_hits();
  // Times are when the caller gets the outputs (after this step's proposals), so TTFT includes
  // all of the first token's work.
  const EngineClock::time_point t = now();
  for (Request* r : first_token_now_) r->first_token_time = t;
  first_token_now_.clear();
  for (const auto& [r, index] : output_index_) {
    if (r->finished()) r->finish_time = t;
    outs[index].first_token_time = r->first_token_time;
    outs[index].finish_time = r->finish_time;
  }
  // Finished requests leave the engine once reported.
  for (const auto& [r, index] : output_index_) {
    if (r->finished()) drop(r);
  }
  output_index_.clear();
  return outs;
}

}  // namespace baton
