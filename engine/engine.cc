// The Engine's life cycle: creation, adding, aborting, finishing and failing requests, and
// appending their tokens. One step (schedule, forward, pick, verify, propose) is in
// engine_step.cc; the prefill/decode hand-off (reserve, commit, release, leases, pools and
// fingerprint) in engine_handoff.cc.
#include "engine/engine.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>

#include "common/status.h"
#include "engine/spec/proposer_factory.h"
#include "engine/structured/json_grammar.h"
#include "kernels/backend_factory.h"
#include "spdlog/spdlog.h"

namespace baton {

namespace {

// A seed nobody can predict (getrandom(2)), for the seeds of unseeded requests.
std::uint64_t entropy_seed() {
  std::uint64_t v = 0;
  auto* p = reinterpret_cast<unsigned char*>(&v);
  std::size_t done = 0;
  while (done < sizeof(v)) {
    const ssize_t got = getrandom(p + done, sizeof(v) - done, 0);
    if (got < 0 && errno == EINTR) continue;
    BATON_CHECK(got > 0, "getrandom failed: errno ", errno);
    done += static_cast<std::size_t>(got);
  }
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config, EngineHooks hooks) {
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = config;
  e->hooks_ = std::move(hooks);
  BATON_ASSIGN_OR_RETURN(e->backend_, make_backend(config.backend));
  // KV that travels between nodes leaves from and arrives in host memory: the pools' own, or their
  // host mirrors', which then take the provider's memory; or in the pools' device memory, for
  // transports that move it (NCCL).
  const bool mirrored = config.role != NodeRole::kColocated && !e->backend_->host_reads_device_memory() &&
                        !config.kv_transfer_in_device_memory;
  KvMemoryProvider* pool_memory = mirrored ? nullptr : config.kv_memory.get();
  BATON_ASSIGN_OR_RETURN(const ModelConfig model_config, ModelConfig::load(config.model_dir));
  const bool hybrid = model_config.num_recurrent_layers() > 0;
  if (hybrid && mirrored) {
    return absl::UnimplementedError(str_cat(config.model_dir, ": ", model_config.architecture_name,
                                            " has recurrent layers, whose recurrent state a hand-off cannot "
                                            "move through host mirrors yet"));
  }
  BATON_ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::open(config.model_dir));
  WeightLoadOptions wo;
  wo.dtype = config.dtype;
  BATON_ASSIGN_OR_RETURN(ModelWeights weights, ModelWeights::load(model_config, checkpoint, *e->backend_, wo));

  KvCacheLayout layout;
  layout.num_layers = model_config.num_attention_layers();
  layout.num_kv_heads = model_config.num_kv_heads;
  layout.head_dim = model_config.head_dim;
  layout.block_size = config.block_size;
  layout.dtype = config.kv_cache_dtype.value_or(e->backend_->activation_dtype());
  if (!e->backend_->supports_kv_cache_dtype(layout.dtype)) {
    return absl::InvalidArgumentError(str_cat("kv cache dtype ", dtype_name(layout.dtype), ": the ",
                                              e->backend_->describe(), " backend does not store a KV cache of it (",
                                              dtype_name(e->backend_->activation_dtype()), " does)"));
  }
  std::int64_t kv_cache_bytes = config.kv_cache_bytes;
  // Drafts per verification, for sizing the logits buffer and the recurrent state's slots. MTP's
  // default (one per MTP layer) is known only once its head is loaded, after the model: size for
  // up to kMaxDefaultDrafts then (published MTP checkpoints have 1 to 3 layers), and check below.
  constexpr std::int32_t kMaxDefaultDrafts = 8;
  std::int32_t k_sized = 0;
  if (config.speculative) {
    k_sized = config.speculative->num_speculative_tokens > 0 ? config.speculative->num_speculative_tokens
                                                             : kMaxDefaultDrafts;
  }
  if (hybrid) {
    // A recurrent state group (1 + k slots) for each running request, out of the same budget
    // (before a cap in tokens, which is the KV's).
    const StateCacheLayout state_layout = recurrent_state_layout(model_config, k_sized + 1);
    const std::int64_t state_bytes = state_layout.bytes_per_group() * config.scheduler.max_num_seqs;
    if (config.scheduler.max_num_seqs <= 0 || state_bytes >= kv_cache_bytes) {
      return absl::ResourceExhaustedError(str_cat("recurrent state of ", config.scheduler.max_num_seqs, " requests (",
                                                  state_bytes, " bytes: ", state_layout.describe(),
                                                  ") does not fit the KV cache memory (", kv_cache_bytes,
                                                  " bytes); raise --kv-cache-memory or lower --max-num-seqs"));
    }
    kv_cache_bytes -= state_bytes;
    BATON_ASSIGN_OR_RETURN(StateCache states,
                           StateCache::create(*e->backend_, state_layout, config.scheduler.max_num_seqs,
                                              pool_memory, "state"));
    e->state_cache_ = std::make_unique<StateCache>(std::move(states));
    e->state_groups_ = std::make_unique<StateGroupPool>(config.scheduler.max_num_seqs);
  }
  if (config.kv_cache_tokens) {
    const std::int64_t blocks = (std::max<std::int64_t>(*config.kv_cache_tokens, 1) + config.block_size - 1) / config.block_size;
    kv_cache_bytes = std::min(kv_cache_bytes, blocks * layout.bytes_per_block());
  }
  const std::int32_t num_blocks = KvCache::blocks_for_budget(layout, kv_cache_bytes);
  BATON_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*e->backend_, layout, num_blocks, pool_memory, "target"));
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
                                                  kv_cache_bytes, " bytes) holds ", cache_tokens,
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
  to.max_model_len = max_len;
  to.block_size = config.block_size;
  // A verifying request needs logits at its pending token and at each draft.
  to.max_num_logits = std::min(sc.max_num_batched_tokens, sc.max_num_seqs * (k_sized + 1));
  const bool graphs = e->backend_->captures_graphs() &&
                      (config.graphs == GraphMode::kOn ||
                       (config.graphs == GraphMode::kAuto && e->backend_->device().type == DeviceType::kCuda));
  if (config.graph_max_batch_size < 0) {
    return absl::InvalidArgumentError(str_cat("graph_max_batch_size must be >= 0, got ", config.graph_max_batch_size));
  }
  if (graphs) {
    to.graph_max_seqs = std::min(sc.max_num_seqs, config.graph_max_batch_size > 0 ? config.graph_max_batch_size : 256);
    to.graph_max_tokens_per_seq = k_sized + 1;  // decode steps, and verifications of k drafts
  }
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
    pc.kv_cache_bytes = kv_cache_bytes;
    pc.kv_cache_dtype = layout.dtype;
    pc.kv_memory = pool_memory;
    pc.max_model_len = max_len;
    pc.max_num_batched_tokens = sc.max_num_batched_tokens;
    pc.max_num_seqs = sc.max_num_seqs;
    pc.dtype = config.dtype;
    pc.graph_max_seqs = to.graph_max_seqs;
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
    // A prefill node drafts once per request, for the hand-off's proposer state, whatever its batch.
    if (config.role == NodeRole::kPrefill) {
      resolved.disable_by_batch_size = 0;
      resolved.adaptive_draft_length = false;
    }
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
    if (e->hooks_.step_clock) e->speculator_->set_step_clock(e->hooks_.step_clock);
    const TargetStateSpec states = e->speculator_->target_states();
    BATON_RETURN_IF_ERROR(e->model_->reserve_captures(states.layer_inputs.size(), states.final_hidden));
    TargetStateConsumer* consumer = e->speculator_->state_consumer();
    if (sc.enable_prefix_caching && consumer != nullptr && !consumer->enable_prefix_cache()) {
      // A prefix-cache hit skips the target forward over those positions, whose hidden states this
      // proposer needs and does not cache itself. Info, not a warning: prefix caching is on by
      // default, so the user asked for nothing that is being refused.
      spdlog::info("prefix caching is off: the {} proposer needs the target's hidden states of every prompt position",
                   spec_method_name(config.speculative->method));
      sc.enable_prefix_caching = false;
    }
  } else if (config.role != NodeRole::kColocated) {
    BATON_RETURN_IF_ERROR(validate_for_role(std::nullopt, config.role, model_config.has_recurrent_layers));
  }
  if (mirrored) {
    for (const KvPoolInfo& p : e->kv_pools()) {
      BATON_CHECK(p.cache != nullptr, "pool ", p.name, " has no host mirror");  // hybrids refused above
      BATON_ASSIGN_OR_RETURN(KvHostMirror m, KvHostMirror::create(*e->backend_, *p.cache, config.kv_memory.get(), p.name));
      e->mirrors_.push_back(std::move(m));
    }
  }
  if (hybrid && sc.enable_prefix_caching) {
    // A prefix hit skips the positions whose recurrent state the request would start from.
    spdlog::info("prefix caching is off: {} keeps a recurrent state that cached KV blocks do not hold",
                 model_config.architecture_name);
    sc.enable_prefix_caching = false;
  }
  e->scheduler_ = std::make_unique<Scheduler>(sc, *e->pool_, e->speculator_ != nullptr, e->state_groups_.get());
  if (TargetStateConsumer* c = e->speculator_ ? e->speculator_->state_consumer() : nullptr;
      c != nullptr && sc.enable_prefix_caching) {
    // EAGLE/MTP heads cache their own KV of prompt prefixes; a prompt reuses what both caches hold.
    e->scheduler_->limit_prefix_reuse(
        {[c](const Request& r, std::int32_t positions) {
           return c->adopt_cached_prefix(r.key, r.tokens, r.blocks.salt(), positions);
         },
         [c](const Request& r) { c->release_cached_prefix(r.key); }});
  }
  e->seed_source_.seed(config.seed ? *config.seed : entropy_seed());
  // A prefill node's forwards push KV layer by layer and never replay graphs.
  if (config.role != NodeRole::kPrefill) BATON_RETURN_IF_ERROR(e->capture_step_graphs());
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
                 "; ", node_role_name(config_.role), " role; ", spec,
                 model_->options().graph_max_seqs > 0
                     ? str_cat("; graphs for batches of up to ", model_->options().graph_max_seqs, " sequences")
                     : std::string(),
                 !mirrors_.empty()                                                         ? "; KV transfers through host mirrors of the pools"
                 : config_.kv_transfer_in_device_memory && !backend_->host_reads_device_memory() ? "; KV transfers from and into device memory"
                                                                                                 : "");
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
  r->blocks.set_salt(options.cache_salt);
  if (decoder_factory_) r->decoder = decoder_factory_();
  r->stop_checker = std::make_unique<StopChecker>(r->params, c.eos_token_ids, r->decoder.get());
  if (absl::Status s = constrain(*r); !s.ok()) {
    return absl::Status(s.code(), str_cat("request '", id, "': ", s.message()));
  }
  if (speculator_) speculator_->add_request(*r);
  scheduler_->add(r.get());
  requests_.emplace(id, std::move(r));
  return absl::OkStatus();
}

void Engine::set_token_bytes(const std::vector<std::string>& bytes) {
  token_masker_ = std::make_shared<const structured::TokenMasker>(bytes, model_->config().eos_token_ids);
}

absl::Status Engine::constrain(Request& r) {
  const std::string& format = r.params.response_format;
  if (format.empty()) return absl::OkStatus();
  if (!token_masker_) {
    return absl::InvalidArgumentError("response_format needs the model's tokenizer, and this engine has none");
  }
  if (r.params.ignore_eos) {
    // The format ends with the end token; output past it would follow no grammar.
    return absl::InvalidArgumentError("response_format cannot be combined with ignore_eos");
  }
  if (token_masker_->vocab_size() > static_cast<std::size_t>(model_->config().vocab_size)) {
    return absl::InvalidArgumentError("response_format: the tokenizer has more tokens than the model");
  }
  auto it = grammars_.find(format);
  if (it == grammars_.end()) {
    absl::StatusOr<std::shared_ptr<const structured::Grammar>> g = structured::response_format_grammar(format);
    if (!g.ok()) return absl::InvalidArgumentError(g.status().message());
    if (grammars_.size() >= 64) grammars_.clear();
    it = grammars_.emplace(format, *g).first;
  }
  if (!it->second) return absl::OkStatus();  // {"type": "text"}
  // The masker covers the tokenizer's ids; the model's rows may be longer (padded vocabularies):
  // those ids are never allowed.
  r.constraint = std::make_unique<structured::OutputConstraint>(it->second, token_masker_,
                                                                model_->config().vocab_size);
  for (std::int32_t t : r.output()) BATON_RETURN_IF_ERROR(r.constraint->advance(t));
  return absl::OkStatus();
}

void Engine::fill_counts(const Request* r, RequestOutput& o) const {
  o.num_prompt_tokens = r->prompt_len;
  o.num_cached_prompt_tokens = r->num_cached_prompt;
  o.num_output_tokens = r->num_output();
  o.spec = r->spec;
  o.hidden_states_path = r->hidden_states_path;
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
  fail(r, why, output_for(r, outs));
}

void Engine::fail(Request* r, const absl::Status& why, RequestOutput& o) {
  if (r->finished()) return;
  spdlog::warn("request '{}' failed and was finished: {}", r->id, why.ToString());
  ++stats_.request_faults;
  r->error = std::string(why.message());
  finish(r, FinishReason::kError);
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
    if (r->constraint) {
      if (absl::Status s = r->constraint->advance(tokens[i]); !s.ok()) {
        fail(r, s, o);
        break;
      }
    }
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

}  // namespace baton
