#include "engine/spec/head_proposer.h"

#include <algorithm>
#include <limits>

#include "common/status.h"

namespace baton {

// One request's part of a propose() call.
struct HeadProposer::Drafting : Work {
  std::int32_t target_end = 0;  // catch up head positions [computed, target_end)
  // output_rows[j]: the drafted_ row holding the head's output at position target_end - 1 + j
  // (j = 0: the last catch-up position), the feature that drafting step j + 1 consumes.
  std::vector<std::int32_t> output_rows;
  std::vector<std::int32_t> written;  // per module: first drafting position it has not computed
};

absl::StatusOr<std::unique_ptr<HeadProposer>> HeadProposer::create(const SpeculativeConfig& config,
                                                                  const ProposerContext& ctx) {
  std::unique_ptr<HeadProposer> p(new HeadProposer());
  const std::string dir = config.model.empty() ? ctx.target_dir : config.model;
  HeadOptions ho;
  ho.max_num_tokens = ctx.max_num_batched_tokens;
  ho.max_num_seqs = ctx.max_num_seqs;
  ho.max_model_len = ctx.max_model_len;
  ho.block_size = ctx.block_size;
  ho.dtype = ctx.dtype;
  ho.graph_max_seqs = ctx.graph_max_seqs;
  ho.num_speculative_tokens = config.num_speculative_tokens;
  BATON_ASSIGN_OR_RETURN(p->head_, DraftHead::load(config.method, dir, *ctx.target_config, *ctx.target_weights,
                                                   *ctx.backend, ho));
  p->name_ = std::string(spec_method_name(config.method));
  p->method_ = config.method;
  p->width_ = p->head_->target_feature_width();
  const TargetStateSpec states = p->head_->target_states();
  p->num_states_ = states.layer_inputs.size() + (states.final_hidden ? 1 : 0);
  BATON_RETURN_IF_ERROR(p->init_sampling(config, ctx));
  const std::int32_t k = config.num_speculative_tokens > 0 ? config.num_speculative_tokens : p->head_->num_modules();
  BATON_RETURN_IF_ERROR(p->init_kv(*ctx.backend, p->head_->kv_layout(), ctx, k));
  // One propose() keeps at most one catch-up output and k - 1 draft outputs per request; a gather
  // reads at most a catch-up forward's tokens or a draft step's (a module's unwritten positions).
  const auto hidden = static_cast<std::size_t>(p->head_->hidden());
  BATON_ASSIGN_OR_RETURN(p->drafted_, ctx.backend->allocate(static_cast<std::size_t>(std::max(p->k_, 1)) *
                                                            static_cast<std::size_t>(p->max_seqs_) * hidden * sizeof(float)));
  p->index_capacity_ = std::max<std::int64_t>(p->budget_, static_cast<std::int64_t>(p->max_seqs_) * p->head_->num_modules());
  BATON_ASSIGN_OR_RETURN(p->gather_index_,
                         ctx.backend->allocate(static_cast<std::size_t>(p->index_capacity_) * sizeof(std::int32_t)));
  return p;
}

std::optional<std::int32_t> HeadProposer::default_num_speculative_tokens() const {
  if (method_ != SpecMethod::kMtp) return std::nullopt;
  return head_->num_modules();
}

std::optional<KvPoolFingerprint> HeadProposer::kv_fingerprint() const {
  return KvPoolFingerprint{"draft", str_cat(name_, " head"), head_->layer_config().identity,
                           std::string(dtype_name(head_->weight_dtype())), cache_->layout()};
}

absl::Status HeadProposer::observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                                   std::int32_t n_valid) {
  // Rows of an older forward still live here mean before_target_forward() was skipped: their
  // capture tensors hold another forward's states now. A wiring bug, never an input error.
  BATON_CHECK(live_keys_.empty() || rows.forward_id == live_forward_, name_, " proposer: states of target forward ",
              rows.forward_id, " while rows of forward ", live_forward_, " are live (before_target_forward() missed)");
  State* base = state_of(key);
  if (base == nullptr) return absl::OkStatus();
  HeadState& s = head_state(*base);
  const std::size_t count = num_states_;
  bool shapes_ok = rows.tensors.size() == count && n_valid <= n && n_valid >= 0 && rows.first_row >= 0;
  for (const TensorView& t : rows.tensors) {
    shapes_ok = shapes_ok && t.dtype == DType::kF32 && t.ndim == 2 && t.dim(1) * static_cast<std::int64_t>(count) == width_ &&
                t.stride(0) == t.dim(1) && rows.first_row + n <= t.dim(0);
  }
  if (!shapes_ok) {
    return absl::InternalError(str_cat(name_, " proposer: ", rows.tensors.size(), " target-state tensors (",
                                       rows.tensors.empty() ? std::string("none") : rows.tensors.front().describe(),
                                       ") from row ", rows.first_row, " for ", n, " rows of width ", width_));
  }
  const bool listed = s.live_count > 0;  // already in live_keys_
  keep_live_on_host(s);                  // one chunk per request per forward, so normally nothing
  if (rows_end(s) > s.rows_start && start >= s.rows_start) {
    if (start > rows_end(s)) {
      return absl::InternalError(str_cat(name_, " proposer: target states for position ", start, " but position ",
                                         rows_end(s), " came last"));
    }
    // The target recomputed positions from `start` (preemption by recompute): replace them.
    s.rows.resize(static_cast<std::size_t>(start - s.rows_start) * static_cast<std::size_t>(width_));
  } else {
    if (start > s.computed) {
      return absl::InternalError(str_cat(name_, " proposer: target states for position ", start,
                                         " but the head needs position ", s.computed, " first"));
    }
    s.rows.clear();
    s.rows_start = start;
  }
  // Head KV computed from positions at or after `start` is stale now.
  s.computed = std::min(s.computed, start);
  if (n_valid == 0) return absl::OkStatus();
  if (live_keys_.empty()) live_tensors_.assign(rows.tensors.begin(), rows.tensors.end());
  live_forward_ = rows.forward_id;
  if (!listed) live_keys_.push_back(key);
  s.live_row = rows.first_row;
  s.live_count = n_valid;
  return absl::OkStatus();
}

void HeadProposer::before_target_forward() {
  // What a later catch-up can still read: from each state's last computed position on. Those rows
  // of every state come down together: gathered side by side into the head's (idle) input buffer,
  // then one copy, not a copy per request and tensor.
  std::vector<HeadState*>& keep = kept_;  // reused from step to step
  keep.clear();
  index_.clear();
  for (RequestKey key : live_keys_) {
    State* base = state_of(key);
    if (base == nullptr) continue;  // removed since
    HeadState& s = head_state(*base);
    drop_rows_before(s, std::max(s.rows_start, s.computed - 1));
    if (s.live_count == 0) continue;
    keep.push_back(&s);
    for (std::int32_t r = 0; r < s.live_count; ++r) index_.push_back(static_cast<std::int32_t>(s.live_row + r));
  }
  if (!index_.empty()) {
    const auto n = static_cast<std::int64_t>(index_.size());
    const TensorView rows = head_->feature_input(n, width_);
    const TensorView idx = upload_index(index_);
    const std::int64_t h = live_tensors_.front().dim(1);
    for (std::size_t c = 0; c < live_tensors_.size(); ++c) {
      const auto col = static_cast<std::int64_t>(c) * h;
      backend_->gather_rows(live_tensors_[c], idx, rows.slice_last(col, col + h));
    }
    staging_.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(width_));
    backend_->copy_to_host(staging_.data(), rows.data, staging_.size() * sizeof(float));
    auto from = staging_.begin();
    for (HeadState* s : keep) {
      const auto count = static_cast<std::ptrdiff_t>(s->live_count) * width_;
      s->rows.insert(s->rows.end(), from, from + count);
      from += count;
      s->live_count = 0;
    }
  }
  live_keys_.clear();
  live_tensors_.clear();
}

void HeadProposer::drop_rows_before(HeadState& s, std::int32_t from) const {
  if (from <= s.rows_start) return;
  const std::int32_t on_host = std::min(from, host_end(s)) - s.rows_start;
  s.rows.erase(s.rows.begin(), s.rows.begin() + static_cast<std::ptrdiff_t>(on_host) * width_);
  const std::int32_t live = std::min(from - s.rows_start - on_host, s.live_count);
  s.live_row += live;
  s.live_count -= live;
  s.rows_start = from;
}

void HeadProposer::read_live(const HeadState& s, std::vector<float>& out) const {
  if (s.live_count == 0) return;
  const auto n = static_cast<std::size_t>(s.live_count), w = static_cast<std::size_t>(width_);
  const std::size_t base = out.size();
  out.resize(base + n * w);
  std::vector<float> part;
  for (std::size_t c = 0; c < live_tensors_.size(); ++c) {
    const TensorView& t = live_tensors_[c];
    const auto h = static_cast<std::size_t>(t.dim(1));
    part.resize(n * h);
    backend_->copy_to_host(part.data(), t.ptr<const float>() + static_cast<std::size_t>(s.live_row) * h,
                           part.size() * sizeof(float));
    for (std::size_t r = 0; r < n; ++r) {
      std::copy_n(part.data() + r * h, h, out.data() + base + r * w + c * h);
    }
  }
}

void HeadProposer::keep_live_on_host(HeadState& s) {
  read_live(s, s.rows);
  s.live_count = 0;
}

TensorView HeadProposer::upload_index(std::span<const std::int32_t> index) {
  BATON_CHECK(static_cast<std::int64_t>(index.size()) <= index_capacity_, name_, " proposer: a gather of ", index.size(),
              " rows, room for ", index_capacity_);
  const TensorView t = gather_index_.view(DType::kI32, {static_cast<std::int64_t>(index.size())});
  backend_->copy_to_device(t.data, index.data(), index.size() * sizeof(std::int32_t));
  return t;
}

void HeadProposer::fill_target_features(std::span<const CatchUpSlice> slices, std::span<const CatchUp> items,
                                        const TensorView& features) {
  // Every row live (the usual step): one gather per captured tensor. Otherwise the host rows go up
  // in one copy and the live ones follow, a run of neighbouring capture rows at a time.
  index_.clear();
  bool all_live = true;
  for (const CatchUpSlice& sl : slices) {
    const auto& s = static_cast<const HeadState&>(*items[sl.item].work->s);
    const std::int32_t first = items[sl.item].start + sl.offset;
    for (std::int32_t p = first; p < first + sl.count; ++p) {
      const bool live = p >= host_end(s);
      all_live = all_live && live;
      index_.push_back(live ? static_cast<std::int32_t>(s.live_row + (p - host_end(s))) : -1);
    }
  }
  const std::int64_t t = features.dim(0);
  const auto w = static_cast<std::size_t>(width_);
  const std::int64_t h = live_tensors_.empty() ? 0 : live_tensors_.front().dim(1);
  if (all_live) {
    const TensorView idx = upload_index(index_);
    for (std::size_t c = 0; c < live_tensors_.size(); ++c) {
      const auto col = static_cast<std::int64_t>(c) * h;
      backend_->gather_rows(live_tensors_[c], idx, features.slice_last(col, col + h));
    }
    return;
  }
  staging_.assign(static_cast<std::size_t>(t) * w, 0.0f);
  std::size_t r = 0;
  for (const CatchUpSlice& sl : slices) {
    const auto& s = static_cast<const HeadState&>(*items[sl.item].work->s);
    const std::int32_t first = items[sl.item].start + sl.offset;
    for (std::int32_t p = first; p < first + sl.count; ++p, ++r) {
      if (index_[r] >= 0) continue;
      const auto from = static_cast<std::size_t>(p - s.rows_start) * w;
      std::copy_n(s.rows.data() + from, w, staging_.data() + r * w);
    }
  }
  backend_->copy_to_device(features.data, staging_.data(), staging_.size() * sizeof(float));
  for (std::size_t run = 0; run < index_.size();) {
    if (index_[run] < 0) {
      ++run;
      continue;
    }
    std::size_t end = run + 1;
    while (end < index_.size() && index_[end] == index_[end - 1] + 1) ++end;
    const auto rows = static_cast<std::int64_t>(end - run), first = static_cast<std::int64_t>(run);
    for (std::size_t c = 0; c < live_tensors_.size(); ++c) {
      const auto col = static_cast<std::int64_t>(c) * h;
      backend_->copy(live_tensors_[c].slice0(index_[run], index_[run] + rows),
                     features.slice0(first, first + rows).slice_last(col, col + h));
    }
    run = end;
  }
}

std::int32_t HeadProposer::keep_outputs(const HeadOutput& out) {
  const std::int64_t n = out.outputs.dim(0);
  const std::int64_t capacity = static_cast<std::int64_t>(std::max(k_, 1)) * max_seqs_;
  BATON_CHECK(drafted_rows_ + n <= capacity, name_, " proposer: ", drafted_rows_ + n, " drafted rows, room for ", capacity);
  const TensorView all = drafted_.view(DType::kF32, {capacity, head_->hidden()});
  backend_->copy(out.outputs, all.slice0(drafted_rows_, drafted_rows_ + n));
  const std::int32_t first = drafted_rows_;
  drafted_rows_ += static_cast<std::int32_t>(n);
  return first;
}

void HeadProposer::gather_drafted(std::span<const std::int32_t> rows, const TensorView& features) {
  const TensorView idx = upload_index(rows);
  backend_->gather_rows(drafted_.view(DType::kF32, {std::max(drafted_rows_, 1), head_->hidden()}), idx, features);
}

std::span<const std::int32_t> HeadProposer::greedy_ids(const HeadOutput& out) {
  if (probabilistic_ || out.device_logits.data == nullptr) return {};  // no rows wanted logits
  return argmax_on_device(out.device_logits);
}

std::int32_t HeadProposer::draft_from(const HeadOutput& out, std::span<const std::int32_t> greedy_ids, std::size_t i,
                                      ProposalRequest& p) {
  if (!probabilistic_) return greedy_ids[i] >= 0 ? head_->to_target_id(greedy_ids[i]) : -1;
  const auto out_vocab = static_cast<std::size_t>(head_->out_vocab());
  return pick_head(std::span<const float>(out.logits).subspan(i * out_vocab, out_vocab), p);
}

std::int32_t HeadProposer::pick_head(std::span<const float> logits, ProposalRequest& p) {
  // q over the target vocabulary: the head's logits at their target ids, nothing elsewhere.
  row_.assign(static_cast<std::size_t>(vocab_), -std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    row_[static_cast<std::size_t>(head_->to_target_id(static_cast<std::int32_t>(i)))] = logits[i];
  }
  return pick(row_, p);
}

absl::Status HeadProposer::catch_up(std::vector<Drafting>& work) {
  std::vector<CatchUp> items;
  for (Drafting& d : work) {
    HeadState& s = head_state(*d.s);
    // Head position p consumes token p + 1 and the target's state at p.
    items.push_back(CatchUp{&d, s.computed,
                            d.p->tokens.subspan(static_cast<std::size_t>(s.computed) + 1,
                                                static_cast<std::size_t>(d.target_end - s.computed))});
  }
  BATON_RETURN_IF_ERROR(run_catch_ups(
      items, [&](const ForwardBatch& batch, std::span<const CatchUpSlice> slices, std::span<Work* const> owners) {
        const TensorView features = head_->feature_input(batch.num_tokens(), width_);
        fill_target_features(slices, items, features);
        // Every module learns the same positions; module 0's output gives the first draft.
        for (std::int32_t mi = head_->num_modules() - 1; mi >= 0; --mi) {
          BATON_ASSIGN_OR_RETURN(HeadOutput out, head_->forward(mi, batch, features, /*from_target=*/true, *cache_,
                                                                /*logits_to_host=*/mi == 0 && probabilistic_));
          if (mi != 0) continue;
          const std::span<const std::int32_t> ids = greedy_ids(out);
          const std::int32_t first_row = owners.empty() ? 0 : keep_outputs(out);
          for (std::size_t i = 0; i < owners.size(); ++i) {
            auto& d = static_cast<Drafting&>(*owners[i]);
            const std::int32_t t = draft_from(out, ids, i, *d.p);
            if (t >= 0) d.p->drafts->push_back(t);
            d.output_rows.assign(1, first_row + static_cast<std::int32_t>(i));
          }
        }
        return absl::OkStatus();
      }));
  // Keep the row of the last computed position (to recompute it when nothing new arrives).
  for (Drafting& d : work) {
    HeadState& s = head_state(*d.s);
    drop_rows_before(s, std::max(s.rows_start, s.computed - 1));
  }
  return absl::OkStatus();
}

absl::Status HeadProposer::draft_steps(std::vector<Drafting>& work) {
  const std::int32_t modules = head_->num_modules();
  std::vector<std::int32_t> feature_rows;  // drafted_ rows, one per batch token
  std::vector<std::int32_t> last_index;
  last_index.reserve(work.size());
  for (std::int32_t step = 1; step < k_; ++step) {
    const std::int32_t module = step % modules;
    ForwardBatch batch;
    std::vector<Drafting*> owners;
    feature_rows.clear();
    last_index.clear();
    for (Drafting& d : work) {
      if (!d.ok || static_cast<std::int32_t>(d.p->drafts->size()) != step || step >= d.p->max_drafts) continue;
      const std::int32_t pos = d.target_end - 1 + step;
      if (!reserve_positions(d, pos + 1)) continue;
      // Drafting position q = target_end - 1 + j consumes drafts[j - 1] and outputs[j - 1]; this
      // module runs at every such position it has not computed yet, up to `pos`.
      const std::int32_t from = d.written[static_cast<std::size_t>(module)];
      ForwardSequence seq;
      seq.tokens = std::span<const std::int32_t>(*d.p->drafts)
                       .subspan(static_cast<std::size_t>(from - d.target_end), static_cast<std::size_t>(pos + 1 - from));
      seq.start_position = from;
      seq.block_table = d.s->table.blocks();
      last_index.push_back(pos - from);
      seq.logits_indices = std::span<const std::int32_t>(&last_index.back(), 1);
      for (std::int32_t q = from; q <= pos; ++q) {
        feature_rows.push_back(d.output_rows[static_cast<std::size_t>(q - d.target_end)]);
      }
      d.written[static_cast<std::size_t>(module)] = pos + 1;
      batch.sequences.push_back(seq);
      owners.push_back(&d);
    }
    if (batch.sequences.empty()) break;
    const TensorView features = head_->feature_input(static_cast<std::int64_t>(feature_rows.size()), head_->hidden());
    gather_drafted(feature_rows, features);
    BATON_ASSIGN_OR_RETURN(HeadOutput out, head_->forward(module, batch, features, /*from_target=*/false, *cache_,
                                                          /*logits_to_host=*/probabilistic_));
    const std::span<const std::int32_t> ids = greedy_ids(out);
    const std::int32_t first_row = keep_outputs(out);
    for (std::size_t i = 0; i < owners.size(); ++i) {
      Drafting& d = *owners[i];
      const std::int32_t t = draft_from(out, ids, i, *d.p);
      if (t >= 0) d.p->drafts->push_back(t);
      d.output_rows.push_back(first_row + static_cast<std::int32_t>(i));
    }
  }
  return absl::OkStatus();
}

absl::Status HeadProposer::propose(std::span<ProposalRequest> batch) {
  drafted_rows_ = 0;
  std::vector<Drafting> work;
  work.reserve(batch.size());  // catch-up items point into it
  for (ProposalRequest& p : batch) {
    State* base = state_of(p.key);
    if (base == nullptr) {
      p.status = absl::FailedPreconditionError(str_cat(name_, " proposer: request key ", p.key, " was never added"));
      continue;
    }
    if (p.max_drafts <= 0) continue;
    HeadState& s = head_state(*base);
    // Head positions up to n - 2 pair a final target state with a known next token.
    const auto target_end = static_cast<std::int32_t>(p.tokens.size()) - 1;
    if (target_end < 1 || rows_end(s) < target_end) continue;  // states not all here yet
    if (s.computed >= target_end) s.computed = target_end - 1;  // nothing new: recompute the last position
    s.table.shrink_to(*pool_, s.computed);  // drop KV written while drafting last time
    Drafting d;
    d.p = &p;
    d.s = base;
    d.target_end = target_end;
    d.written.assign(static_cast<std::size_t>(head_->num_modules()), target_end);
    work.push_back(std::move(d));
  }
  BATON_RETURN_IF_ERROR(catch_up(work));
  cache_final_blocks(work);
  BATON_RETURN_IF_ERROR(draft_steps(work));
  return absl::OkStatus();
}

void HeadProposer::cache_final_blocks(const std::vector<Drafting>& work) {
  if (!prefix_cache_) return;
  for (const Drafting& d : work) {
    if (!d.s->caches) continue;
    // With key lead 1, block i is final once its key's last token, position (i + 1) * block_size,
    // is below `computed`: its positions then all lie before computed - 1, the one position a later
    // call may recompute.
    const auto final_tokens = static_cast<std::size_t>(std::max(0, d.s->computed));
    d.s->table.register_full_blocks(*pool_, d.p->tokens.first(std::min(final_tokens, d.p->tokens.size())));
  }
}

std::int32_t HeadProposer::adopt_cached_prefix(RequestKey key, std::span<const std::int32_t> tokens, std::uint64_t salt,
                                               std::int32_t positions) {
  if (!prefix_cache_) return 0;
  State* base = adopt_cached_blocks(key, tokens, salt, positions);
  if (base == nullptr) return 0;
  HeadState& s = head_state(*base);
  s.rows_start = s.computed;  // the target's states start there
  return s.computed;
}

absl::StatusOr<ProposerHandoff> HeadProposer::export_state(RequestKey key) const {
  const State* base = state_of(key);
  if (base == nullptr) return absl::NotFoundError(str_cat(name_, " proposer: no state for request key ", key));
  const auto& s = static_cast<const HeadState&>(*base);
  // Invariant: rows_start <= computed, so the head KV of [0, rows_start) and the rows from there
  // on are the whole state.
  ProposerHandoff h;
  h.kv_positions = s.rows_start;
  h.kv_blocks = blocks_for_positions(s, h.kv_positions);
  h.feature_rows = s.rows;
  read_live(s, h.feature_rows);
  h.feature_width = width_;
  return h;
}

absl::Status HeadProposer::import_state(RequestKey key, const ProposerHandoff& h, std::span<const std::int32_t> tokens) {
  if (h.feature_width != width_ || h.feature_rows.size() % static_cast<std::size_t>(std::max(width_, 1)) != 0) {
    return absl::InvalidArgumentError(str_cat(name_, " hand-off: feature rows of width ", h.feature_width, " (",
                                              h.feature_rows.size(), " floats) where this head reads ", width_));
  }
  const auto rows = static_cast<std::int32_t>(h.feature_rows.size() / static_cast<std::size_t>(width_));
  // The rows must reach the last prompt position: tokens are prompt + first token.
  if (h.kv_positions + rows != static_cast<std::int32_t>(tokens.size()) - 1) {
    return absl::InvalidArgumentError(str_cat(name_, " hand-off: head KV for ", h.kv_positions, " positions and ", rows,
                                              " feature rows do not cover the ", tokens.size() - 1, " prompt positions"));
  }
  State* base = nullptr;
  BATON_RETURN_IF_ERROR(adopt_handoff_kv(key, h, &base));
  HeadState& s = head_state(*base);
  s.rows_start = h.kv_positions;
  s.rows = h.feature_rows;
  s.live_count = 0;
  return absl::OkStatus();
}

}  // namespace baton
