#include "engine/spec/dflash_proposer.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "common/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<DFlashProposer>> DFlashProposer::create(const SpeculativeConfig& config,
                                                                      const ProposerContext& ctx) {
  std::unique_ptr<DFlashProposer> p(new DFlashProposer());
  DFlashOptions o;
  o.max_context_tokens = ctx.max_num_batched_tokens;
  o.max_num_seqs = ctx.max_num_seqs;
  o.max_model_len = ctx.max_model_len;
  o.block_size = ctx.block_size;
  o.num_speculative_tokens = config.num_speculative_tokens;
  o.dtype = ctx.dtype;
  o.graph_max_seqs = ctx.graph_max_seqs;
  BATON_ASSIGN_OR_RETURN(p->drafter_, DFlashDrafter::load(config.model, *ctx.target_config, *ctx.target_weights,
                                                          *ctx.backend, o));
  const std::int32_t k = config.num_speculative_tokens;
  // One block forward's logits rows: k per request.
  BATON_RETURN_IF_ERROR(p->init_sampling(config, ctx, ctx.max_num_seqs * k));
  BATON_RETURN_IF_ERROR(p->init_kv(*ctx.backend, p->drafter_->kv_layout(), ctx, k));
  p->draft_rows_.resize(static_cast<std::size_t>(k));
  std::iota(p->draft_rows_.begin(), p->draft_rows_.end(), 1);
  p->max_model_len_ = ctx.max_model_len;
  p->index_capacity_ = std::max(p->budget_, 1);
  BATON_ASSIGN_OR_RETURN(p->gather_index_,
                         ctx.backend->allocate(static_cast<std::size_t>(p->index_capacity_) * sizeof(std::int32_t)));
  return p;
}

std::optional<KvPoolFingerprint> DFlashProposer::kv_fingerprint() const {
  return KvPoolFingerprint{"draft", "dflash drafter", drafter_->layer_config().identity,
                           std::string(dtype_name(drafter_->weight_dtype())), cache_->layout()};
}

absl::Status DFlashProposer::observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                                     std::int32_t n_valid) {
  // Rows of an older forward still pending mean before_target_forward() was skipped: their capture
  // tensors hold another forward's states now. A wiring bug, never an input error.
  BATON_CHECK(pending_.empty() || rows.forward_id == live_forward_, "dflash proposer: states of target forward ",
              rows.forward_id, " while rows of forward ", live_forward_, " are pending (before_target_forward() missed)");
  if (state_of(key) == nullptr || n_valid <= 0) return absl::OkStatus();
  const TargetStateSpec spec = drafter_->target_states();
  const std::size_t count = spec.layer_inputs.size() + (spec.final_hidden ? 1 : 0);
  bool shapes_ok = rows.tensors.size() == count && n_valid <= n && rows.first_row >= 0;
  for (const TensorView& t : rows.tensors) {
    shapes_ok = shapes_ok && t.dtype == DType::kF32 && t.ndim == 2 && t.stride(0) == t.dim(1) &&
                t.dim(1) * static_cast<std::int64_t>(count) == drafter_->target_feature_width() &&
                rows.first_row + n <= t.dim(0);
  }
  if (!shapes_ok) {
    return absl::InternalError(str_cat("dflash proposer: ", rows.tensors.size(), " target-state tensors (",
                                       rows.tensors.empty() ? std::string("none") : rows.tensors.front().describe(),
                                       ") from row ", rows.first_row, " for ", n, " rows of width ",
                                       drafter_->target_feature_width()));
  }
  if (pending_.empty()) live_tensors_.assign(rows.tensors.begin(), rows.tensors.end());
  live_forward_ = rows.forward_id;
  pending_.push_back(Pending{key, start, n_valid, rows.first_row});
  return absl::OkStatus();
}

void DFlashProposer::reset_request(RequestKey key) {
  // Rows observed before the reset belong to KV that is gone; the target recomputes them.
  std::erase_if(pending_, [key](const Pending& e) { return e.key == key; });
  DraftingProposer::reset_request(key);
}

void DFlashProposer::before_target_forward() {
  const absl::Status s = flush_context();
  // Only the backend or a wiring bug fails a context write (bad requests were dropped before).
  BATON_CHECK(s.ok(), "dflash proposer: writing context K/V: ", s.ToString());
}

TensorView DFlashProposer::upload_index(std::span<const std::int32_t> index) {
  BATON_CHECK(static_cast<std::int64_t>(index.size()) <= index_capacity_, "dflash proposer: a gather of ",
              index.size(), " rows, room for ", index_capacity_);
  const TensorView t = gather_index_.view(DType::kI32, {static_cast<std::int64_t>(index.size())});
  backend_->copy_to_device(t.data, index.data(), index.size() * sizeof(std::int32_t));
  return t;
}

absl::Status DFlashProposer::flush_context() {
  if (pending_.empty()) return absl::OkStatus();
  std::vector<Work> work;
  work.reserve(pending_.size());  // catch-up items point into it
  std::vector<CatchUp> items;
  std::vector<const Pending*> sources;
  std::size_t longest = 0;
  for (const Pending& e : pending_) {
    State* base = state_of(e.key);
    if (base == nullptr) continue;  // removed since
    DFlashState& s = dflash_state(*base);
    if (s.broken) continue;
    if (e.start > s.computed) {  // a state before `start` never arrived: its context has a hole
      s.broken = true;
      continue;
    }
    s.computed = e.start;  // positions from `start` on are (re)computed now
    longest = std::max(longest, static_cast<std::size_t>(e.count));
    work.push_back(Work{nullptr, base, true});
    sources.push_back(&e);
  }
  if (zeros_.size() < longest) zeros_.resize(longest, 0);
  for (std::size_t i = 0; i < work.size(); ++i) {
    items.push_back(CatchUp{&work[i], sources[i]->start,
                            std::span<const std::int32_t>(zeros_).first(static_cast<std::size_t>(sources[i]->count))});
  }
  const TargetStateSpec spec = drafter_->target_states();
  const std::int64_t h = drafter_->target_feature_width() / static_cast<std::int64_t>(live_tensors_.size());
  const absl::Status status = run_catch_ups(
      items, [&](const ForwardBatch& batch, std::span<const CatchUpSlice> slices, std::span<Work* const>) {
        index_.clear();
        for (const CatchUpSlice& sl : slices) {
          const Pending& e = *sources[sl.item];
          for (std::int32_t r = 0; r < sl.count; ++r) index_.push_back(static_cast<std::int32_t>(e.row + sl.offset + r));
        }
        const TensorView features = drafter_->feature_input(static_cast<std::int64_t>(index_.size()));
        const TensorView idx = upload_index(index_);
        for (std::size_t c = 0; c < live_tensors_.size(); ++c) {
          const auto col = static_cast<std::int64_t>(c) * h;
          backend_->gather_rows(live_tensors_[c], idx, features.slice_last(col, col + h));
        }
        return drafter_->write_context(batch, features, *cache_);
      });
  for (Work& w : work) {
    if (!w.ok) dflash_state(*w.s).broken = true;  // its pool ran out: the context has a hole
  }
  pending_.clear();
  live_tensors_.clear();
  return status;
}

std::int32_t DFlashProposer::block_tokens(const State& s, std::int32_t drafts) const {
  // The whole block of k masks whenever it fits, so that a draft does not depend on how many are
  // asked for (the block's attention is non-causal); near max_model_len only what fits.
  return s.computed + k_ + 1 <= max_model_len_ ? k_ + 1 : drafts + 1;
}

void DFlashProposer::cache_final_blocks(std::span<const Work> work) {
  if (!prefix_cache_) return;
  for (const Work& w : work) {
    if (!w.s->caches) continue;
    // Key lead 0: a block is final once all its positions are below `computed` (the block
    // drafts write at `computed` and after).
    const auto final_tokens = static_cast<std::size_t>(std::max(0, w.s->computed));
    w.s->table.register_full_blocks(*pool_, w.p->tokens.first(std::min(final_tokens, w.p->tokens.size())));
  }
}

absl::Status DFlashProposer::draft_blocks(std::vector<Work>& work) {
  if (work.empty()) return absl::OkStatus();
  const auto stride = static_cast<std::size_t>(k_ + 1);
  block_tokens_.assign(work.size() * stride, drafter_->mask_token_id());
  std::vector<std::int32_t> counts;
  ForwardBatch batch;
  for (std::size_t i = 0; i < work.size(); ++i) {
    const ProposalRequest& p = *work[i].p;
    const std::int32_t kj = std::min(p.max_drafts, k_);
    block_tokens_[i * stride] = p.tokens.back();
    ForwardSequence seq;
    seq.tokens = std::span<const std::int32_t>(block_tokens_).subspan(i * stride, static_cast<std::size_t>(block_tokens(*work[i].s, kj)));
    seq.start_position = work[i].s->computed;
    seq.block_table = work[i].s->table.blocks();
    seq.logits_indices = std::span<const std::int32_t>(draft_rows_).first(static_cast<std::size_t>(kj));
    batch.sequences.push_back(seq);
    counts.push_back(kj);
  }
  BATON_ASSIGN_OR_RETURN(const TensorView logits, drafter_->draft(batch, *cache_));
  std::size_t row = 0;
  if (!probabilistic_) {
    const std::span<const std::int32_t> ids = argmax_on_device(logits);
    for (std::size_t i = 0; i < work.size(); ++i) {
      for (std::int32_t j = 0; j < counts[i]; ++j) {
        const std::int32_t id = ids[row + static_cast<std::size_t>(j)];
        if (id < 0) break;  // a row without an argmax (NaN): no further drafts
        work[i].p->drafts->push_back(drafter_->to_target_id(id));
      }
      row += static_cast<std::size_t>(counts[i]);
    }
    return absl::OkStatus();
  }
  const auto out_vocab = static_cast<std::size_t>(drafter_->out_vocab());
  logits_.resize(static_cast<std::size_t>(logits.dim(0)) * out_vocab);
  backend_->copy_to_host(logits_.data(), logits.data, logits_.size() * sizeof(float));
  for (std::size_t i = 0; i < work.size(); ++i) {
    for (std::int32_t j = 0; j < counts[i]; ++j) {
      std::span<const float> r(logits_.data() + (row + static_cast<std::size_t>(j)) * out_vocab, out_vocab);
      if (out_vocab != static_cast<std::size_t>(vocab_)) {
        // q over the target vocabulary: the drafter's logits at their target ids, nothing elsewhere.
        row_.assign(static_cast<std::size_t>(vocab_), -std::numeric_limits<float>::infinity());
        for (std::size_t d = 0; d < out_vocab; ++d) {
          row_[static_cast<std::size_t>(drafter_->to_target_id(static_cast<std::int32_t>(d)))] = r[d];
        }
        r = row_;
      }
      const std::int32_t t = pick(r, *work[i].p);
      if (t < 0) break;
      work[i].p->drafts->push_back(t);
    }
    row += static_cast<std::size_t>(counts[i]);
  }
  return absl::OkStatus();
}

absl::Status DFlashProposer::propose(std::span<ProposalRequest> batch) {
  BATON_RETURN_IF_ERROR(flush_context());
  std::vector<Work> work;
  work.reserve(batch.size());
  for (ProposalRequest& p : batch) {
    State* base = state_of(p.key);
    if (base == nullptr) {
      p.status = absl::FailedPreconditionError(str_cat("dflash proposer: request key ", p.key, " was never added"));
      continue;
    }
    if (p.max_drafts <= 0) continue;
    DFlashState& s = dflash_state(*base);
    // The context covers every position whose target state is final: all but the newest token's.
    const auto target_end = static_cast<std::int32_t>(p.tokens.size()) - 1;
    if (s.broken || target_end < 1 || s.computed < target_end) continue;
    s.computed = target_end;
    s.table.shrink_to(*pool_, s.computed);  // blocks held only for last step's query block
    Work w{&p, base, true};
    if (!reserve_positions(w, target_end + block_tokens(s, std::min(p.max_drafts, k_)))) continue;
    work.push_back(w);
  }
  cache_final_blocks(work);
  return draft_blocks(work);
}

std::int32_t DFlashProposer::adopt_cached_prefix(RequestKey key, std::span<const std::int32_t> tokens,
                                                 std::uint64_t salt, std::int32_t positions) {
  if (!prefix_cache_) return 0;
  const State* s = adopt_cached_blocks(key, tokens, salt, positions);
  return s == nullptr ? 0 : s->computed;
}

absl::StatusOr<ProposerHandoff> DFlashProposer::export_state(RequestKey key) const {
  const State* base = state_of(key);
  if (base == nullptr) return absl::NotFoundError(str_cat("dflash proposer: no state for request key ", key));
  const auto& s = static_cast<const DFlashState&>(*base);
  ProposerHandoff h;
  h.kv_positions = s.broken ? 0 : s.computed;  // a context with a hole is worth nothing
  h.kv_blocks = blocks_for_positions(s, h.kv_positions);
  return h;
}

absl::Status DFlashProposer::import_state(RequestKey key, const ProposerHandoff& h, std::span<const std::int32_t> tokens) {
  if (!h.feature_rows.empty() || h.feature_width != 0) {
    return absl::InvalidArgumentError(str_cat("dflash hand-off: ", h.feature_rows.size(), " feature floats of width ",
                                              h.feature_width, " where the drafter takes context K/V only"));
  }
  const auto prompt = static_cast<std::int32_t>(tokens.size()) - 1;  // tokens: prompt + first token
  if (h.kv_positions > prompt) {
    return absl::InvalidArgumentError(str_cat("dflash hand-off: context K/V for ", h.kv_positions,
                                              " positions of a prompt of ", prompt));
  }
  State* base = nullptr;
  BATON_RETURN_IF_ERROR(adopt_handoff_kv(key, h, &base));
  // A prefill engine that could not compute the whole context hands over less: no drafts then.
  dflash_state(*base).broken = h.kv_positions < prompt;
  return absl::OkStatus();
}

}  // namespace baton
