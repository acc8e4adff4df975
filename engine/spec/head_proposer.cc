#include "engine/spec/head_proposer.h"

#include <algorithm>
#include <limits>

#include "common/status.h"

namespace baton {

// One request's part of a propose() call.
struct HeadProposer::Drafting : Work {
  std::int32_t target_end = 0;  // catch up head positions [computed, target_end)
  // outputs[j]: the head's output at position target_end - 1 + j (j = 0: the last catch-up
  // position), the feature that drafting step j + 1 consumes.
  std::vector<std::vector<float>> outputs;
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
  BATON_ASSIGN_OR_RETURN(p->head_, DraftHead::load(config.method, dir, *ctx.target_config, *ctx.target_weights,
                                                   *ctx.backend, ho));
  p->name_ = std::string(spec_method_name(config.method));
  p->method_ = config.method;
  p->width_ = p->head_->target_feature_width();
  p->init_sampling(config, ctx);
  const std::int32_t k = config.num_speculative_tokens > 0 ? config.num_speculative_tokens : p->head_->num_modules();
  BATON_RETURN_IF_ERROR(p->init_kv(*ctx.backend, p->head_->kv_layout(), ctx, k));
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

absl::Status HeadProposer::observe(RequestKey key, std::int32_t start, std::span<const float> rows, std::int32_t n,
                                   std::int32_t n_valid) {
  State* base = state_of(key);
  if (base == nullptr) return absl::OkStatus();
  HeadState& s = head_state(*base);
  if (static_cast<std::int64_t>(rows.size()) != static_cast<std::int64_t>(n) * width_ || n_valid > n) {
    return absl::InternalError(str_cat(name_, " proposer: ", rows.size(), " target-state floats for ", n,
                                       " rows of width ", width_));
  }
  if (!s.rows.empty() && start >= s.rows_start) {
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
  s.rows.insert(s.rows.end(), rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(n_valid) * width_);
  return absl::OkStatus();
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
  const auto hidden = static_cast<std::size_t>(head_->hidden());
  const auto w = static_cast<std::size_t>(width_);
  std::vector<CatchUp> items;
  for (Drafting& d : work) {
    HeadState& s = head_state(*d.s);
    const auto from = static_cast<std::size_t>(s.computed - s.rows_start);
    // Head position p consumes token p + 1 and the target's state at p.
    items.push_back(CatchUp{&d, s.computed,
                            d.p->tokens.subspan(static_cast<std::size_t>(s.computed) + 1,
                                                static_cast<std::size_t>(d.target_end - s.computed)),
                            std::span<const float>(s.rows).subspan(from * w)});
  }
  BATON_RETURN_IF_ERROR(run_catch_ups(
      items, width_, [&](const ForwardBatch& batch, std::span<const float> features, std::span<Work* const> owners) {
        // Every module learns the same positions; module 0's output gives the first draft.
        for (std::int32_t mi = head_->num_modules() - 1; mi >= 0; --mi) {
          BATON_ASSIGN_OR_RETURN(HeadOutput out, head_->forward(mi, batch, features, /*from_target=*/true, *cache_,
                                                                /*logits_to_host=*/mi == 0 && probabilistic_));
          if (mi != 0) continue;
          const std::span<const std::int32_t> ids = greedy_ids(out);
          for (std::size_t i = 0; i < owners.size(); ++i) {
            auto& d = static_cast<Drafting&>(*owners[i]);
            const std::int32_t t = draft_from(out, ids, i, *d.p);
            if (t >= 0) d.p->drafts->push_back(t);
            d.outputs.assign(1, std::vector<float>(out.outputs.begin() + static_cast<std::ptrdiff_t>(i * hidden),
                                                   out.outputs.begin() + static_cast<std::ptrdiff_t>((i + 1) * hidden)));
          }
        }
        return absl::OkStatus();
      }));
  for (Drafting& d : work) {
    // Keep the row of the last computed position (to recompute it when nothing new arrives).
    HeadState& s = head_state(*d.s);
    const std::int32_t keep_from = std::max(s.rows_start, s.computed - 1);
    s.rows.erase(s.rows.begin(), s.rows.begin() + static_cast<std::ptrdiff_t>(keep_from - s.rows_start) * width_);
    s.rows_start = keep_from;
  }
  return absl::OkStatus();
}

absl::Status HeadProposer::draft_steps(std::vector<Drafting>& work) {
  const auto hidden = static_cast<std::size_t>(head_->hidden());
  const std::int32_t modules = head_->num_modules();
  std::vector<float> features;
  std::vector<std::int32_t> last_index;
  last_index.reserve(work.size());
  for (std::int32_t step = 1; step < k_; ++step) {
    const std::int32_t module = step % modules;
    ForwardBatch batch;
    std::vector<Drafting*> owners;
    features.clear();
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
        const std::vector<float>& f = d.outputs[static_cast<std::size_t>(q - d.target_end)];
        features.insert(features.end(), f.begin(), f.end());
      }
      d.written[static_cast<std::size_t>(module)] = pos + 1;
      batch.sequences.push_back(seq);
      owners.push_back(&d);
    }
    if (batch.sequences.empty()) break;
    BATON_ASSIGN_OR_RETURN(HeadOutput out, head_->forward(module, batch, features, /*from_target=*/false, *cache_,
                                                          /*logits_to_host=*/probabilistic_));
    const std::span<const std::int32_t> ids = greedy_ids(out);
    for (std::size_t i = 0; i < owners.size(); ++i) {
      Drafting& d = *owners[i];
      const std::int32_t t = draft_from(out, ids, i, *d.p);
      if (t >= 0) d.p->drafts->push_back(t);
      d.outputs.emplace_back(out.outputs.begin() + static_cast<std::ptrdiff_t>(i * hidden),
                             out.outputs.begin() + static_cast<std::ptrdiff_t>((i + 1) * hidden));
    }
  }
  return absl::OkStatus();
}

absl::Status HeadProposer::propose(std::span<ProposalRequest> batch) {
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
  BATON_RETURN_IF_ERROR(draft_steps(work));
  return absl::OkStatus();
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
  return absl::OkStatus();
}

}  // namespace baton
