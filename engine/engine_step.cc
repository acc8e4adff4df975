// One Engine step: schedule, run the target's forward over the scheduled chunks, pick tokens
// (on the device where it can) or verify drafts, hand the target's states to the proposer, and
// propose the next drafts. Request bookkeeping (finish, fail, append) is engine.cc's.
#include <algorithm>
#include <chrono>
#include <limits>

#include "common/status.h"
#include "engine/engine.h"
#include "kernels/step_profile.h"

namespace baton {
namespace {

constexpr float kPlusInf = std::numeric_limits<float>::infinity();

// Whether every chunk decodes (the pending token and its drafts; no prompt tokens): the steps whose
// time says what verifying drafts costs.
bool only_decode_chunks(const SchedulerOutput& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.start < c.request->prompt_len || c.num_tokens != c.num_drafts + 1) return false;
  }
  return true;
}

}  // namespace

void Engine::propose_pending(std::vector<RequestOutput>& outs) {
  if (!speculator_) return;
  std::vector<Request*>& want = want_drafts_;  // reused from step to step
  want.clear();
  std::size_t decoding = 0;
  for (Request* r : scheduler_->running()) {
    if (!r->decoding() || r->finished()) continue;
    ++decoding;
    if (r->needs_drafts) want.push_back(r);
  }
  if (want.empty()) return;
  for (Request* r : want) r->needs_drafts = false;
  const ProfileScope profile(ProfileClass::kProposer);
  for (const ProposalFailure& f : speculator_->propose(want, max_model_len_, decoding)) fail(f.first, f.second, outs);
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
    if (mirrors_.empty() && backend_->host_reads_device_memory()) {
      batch.on_layer_written = [this](std::int32_t layer) { layer_callback_(layer, layer_writes_); };
    } else {
      batch.on_layer_written = [this](std::int32_t layer) { stage_layer(layer); };
    }
  }
  for (const ScheduledChunk& c : plan.chunks) {
    stats_.prompt_tokens_computed += std::max(0, std::min(c.start + c.num_tokens, c.request->prompt_len) - c.start);
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<ForwardOutput> fwd = model_->forward(batch, *cache_, state_cache_.get());
  if (fwd.ok()) {
    report_staged_layer();  // the last layer
  } else {
    staged_layer_ = -1;  // the chunks run again and send their KV again
    // Pin the failure on the chunks that fail alone; the others run again next step.
    bool culprit = false;
    for (const ScheduledChunk& c : plan.chunks) {
      const ForwardBatch& one = step_batch_.build(std::span<const ScheduledChunk>(&c, 1), states);
      if (absl::StatusOr<ForwardOutput> alone = model_->forward(one, *cache_, state_cache_.get()); !alone.ok()) {
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

void Engine::stage_layer(std::int32_t layer) {
  std::uint64_t fence = 0;
  if (mirrors_.empty()) {
    fence = backend_->fence();  // transports read the device pools: the layer's writes must be done
  } else {
    mirror_spans_.clear();
    for (const KvLayerWrite& w : layer_writes_) {
      cache_->append_position_spans(layer, w.start, w.num_tokens, w.blocks, mirror_spans_);
    }
    fence = mirrors_[0].download(mirror_spans_);
  }
  // The device has this layer queued (and on a GPU its copies run on the copy engine beside the
  // next layers), so waiting for the previous layer's copies does not leave it idle.
  report_staged_layer();
  staged_layer_ = layer;
  staged_fence_ = fence;
}

void Engine::report_staged_layer() {
  if (staged_layer_ < 0) return;
  backend_->wait_for(staged_fence_);
  const std::int32_t layer = staged_layer_;
  staged_layer_ = -1;
  layer_callback_(layer, layer_writes_);
}

SampleRowParams Engine::device_pick(const ScheduledChunk& c) const {
  const Request& r = *c.request;
  SampleRowParams p;  // temperature -1: the host samples
  // Logprobs, logit biases and penalties need the rows on the host, and so do probabilistic drafts (their
  // verification reads p and q) and the deliberately broken verifier. Greedy rows can be picked
  // on every backend; sampled ones where the backend samples.
  const bool host = !(c.samples || c.num_drafts > 0) || r.params.logprobs >= 0 ||
                    Sampler::needs_row_processing(r.params, r.output().size()) || !r.draft_probs.empty() ||
                    (speculator_ && speculator_->broken_for_testing()) ||
                    (c.num_drafts > 0 && !r.params.greedy() && speculator_ && speculator_->verifies_lossy()) ||
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
  // The state after the chunk's last token (RecurrentBatch's slots); a verification below keeps an
  // earlier one instead.
  if (state_cache_) r->state_slot = std::min(c.num_tokens, state_cache_->layout().slots) - 1;
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
    // A whole-row OR (vectorizes), not a search that branches per entry.
    int any_bad = 0;
    for (const float x : logits) any_bad |= static_cast<int>(x != x) | static_cast<int>(x == kPlusInf);
    bad_row = any_bad != 0;
  }
  if (bad_row) {
    // Bad KV (e.g. a corrupt transfer) or weights: this request cannot go on; the others can.
    const char* what = no_finite ? "all -inf" : "NaN or +inf (after temperature, on the device)";
    fail(r, absl::DataLossError(str_cat("the target's logits are ", what, " at position ", c.start + c.num_tokens - 1,
                                        " (corrupt KV cache contents?)")),
         outs);
    return;
  }
  RequestOutput& o = output_for(r, outs);
  if (c.num_drafts > 0) {
    const absl::StatusOr<VerifiedTokens> checked = [&]() -> absl::StatusOr<VerifiedTokens> {
      const ProfileScope profile(ProfileClass::kSampling);
      if (picks.empty()) return speculator_->verify(*r, logits);
      return speculator_->verify_picks(*r, picks);
    }();
    if (!checked.ok()) {
      fail(r, checked.status(), outs);
      return;
    }
    const VerifiedTokens& verified = *checked;
    // KV is valid for the pending token and the accepted drafts; the rest is rolled back. The
    // recurrent state after the last accepted token is in its slot (slot j: after token j).
    r->num_computed = c.start + 1 + verified.num_accepted;
    r->blocks.shrink_to(*pool_, r->num_computed);
    r->state_slot = verified.num_accepted;
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
    absl::StatusOr<SampleResult> s =
        !picks.empty() ? SampleResult{picks[0], 0.0f, {}}
                       : sampler_.try_sample(logits, r->params,
                                             TokenHistory{r->prompt(), r->output(),
                                                          r->constraint ? r->constraint->mask() : std::span<const std::uint8_t>()},
                                             model_->config().eos_token_ids, rng);
    if (!s.ok()) {
      fail(r, s.status(), outs);  // e.g. penalties or temperature overflowed the row: this request only
      return;
    }
    append_tokens(r, std::span<const std::int32_t>(&s->token, 1), std::span<const SampleResult>(&*s, 1), o);
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
    const bool timed = speculator_ && speculator_->wants_step_times();
    const auto t0 = timed ? speculator_->step_now() : std::chrono::steady_clock::time_point{};
    BATON_ASSIGN_OR_RETURN(const bool ran, run_forward(plan, outs));
    if (ran) {
      for (std::size_t i = 0; i < plan.chunks.size(); ++i) process_chunk(plan.chunks[i], i, outs);
      if (timed && only_decode_chunks(plan)) {
        speculator_->record_verify_seconds(plan.chunks.size(),
                                           std::chrono::duration<double>(speculator_->step_now() - t0).count());
      }
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
