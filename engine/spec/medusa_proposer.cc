#include "engine/spec/medusa_proposer.h"

#include <algorithm>
#include <limits>

#include "common/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<MedusaProposer>> MedusaProposer::create(const SpeculativeConfig& config,
                                                                       const ProposerContext& ctx) {
  std::unique_ptr<MedusaProposer> p(new MedusaProposer());
  p->backend_ = ctx.backend;
  const std::int32_t rows = std::max(ctx.max_num_seqs, 1);
  BATON_ASSIGN_OR_RETURN(p->head_, MedusaHead::load(config.model, *ctx.target_config, *ctx.backend, rows, ctx.dtype));
  p->k_ = config.num_speculative_tokens > 0 ? config.num_speculative_tokens : p->head_->num_heads();
  if (p->k_ > p->head_->num_heads()) {
    return absl::InvalidArgumentError(str_cat("speculative_config: `num_speculative_tokens` ", p->k_, " exceeds the ",
                                              p->head_->num_heads(), " heads of the Medusa checkpoint ", config.model,
                                              " (head i drafts token i + 1 of a step)"));
  }
  BATON_RETURN_IF_ERROR(p->picker_.init(config, ctx, rows));
  BATON_ASSIGN_OR_RETURN(p->gather_index_, ctx.backend->allocate(static_cast<std::size_t>(rows) * sizeof(std::int32_t)));
  return p;
}

void MedusaProposer::add_request(RequestKey key, std::span<const std::int32_t> /*prompt*/) { states_.try_emplace(key); }

void MedusaProposer::remove_request(RequestKey key, bool /*finished*/) {
  states_.erase(key);  // a live_keys_ entry left behind finds no state and is skipped
}

void MedusaProposer::reset_request(RequestKey key) {
  if (auto it = states_.find(key); it != states_.end()) it->second = State{};
}

absl::Status MedusaProposer::observe(RequestKey key, std::int32_t start, const TargetStateRows& rows, std::int32_t n,
                                     std::int32_t n_valid) {
  auto it = states_.find(key);
  if (it == states_.end()) return absl::OkStatus();
  State& s = it->second;
  const TensorView* t = rows.tensors.size() == 1 ? &rows.tensors.front() : nullptr;
  if (t == nullptr || t->dtype != DType::kF32 || t->ndim != 2 || t->dim(1) != head_->hidden() ||
      t->stride(0) != t->dim(1) || rows.first_row < 0 || n_valid < 0 || n_valid > n || rows.first_row + n > t->dim(0)) {
    return absl::InternalError(str_cat("medusa proposer: ", rows.tensors.size(), " target-state tensors (",
                                       t == nullptr ? std::string("not one") : t->describe(), ") from row ",
                                       rows.first_row, " for ", n, " rows of width ", head_->hidden()));
  }
  // The target (re)computed positions from `start`: a row kept for one of them is stale.
  if (s.position >= start) s = State{};
  if (n_valid == 0) return absl::OkStatus();
  // Rows of an older forward still live mean before_target_forward() was skipped: a wiring bug.
  BATON_CHECK(live_keys_.empty() || rows.forward_id == live_forward_, "medusa proposer: states of target forward ",
              rows.forward_id, " while rows of forward ", live_forward_, " are live (before_target_forward() missed)");
  live_tensor_ = *t;
  live_forward_ = rows.forward_id;
  if (!s.live) live_keys_.push_back(key);
  s.position = start + n_valid - 1;
  s.live = true;
  s.live_row = rows.first_row + n_valid - 1;
  return absl::OkStatus();
}

void MedusaProposer::before_target_forward() {
  // Every live row comes down: gathered into the head's (idle) input rows, then one copy.
  index_.clear();
  std::vector<State*> keep;
  for (RequestKey key : live_keys_) {
    auto it = states_.find(key);
    if (it == states_.end() || !it->second.live) continue;  // removed, reset, or listed twice
    it->second.live = false;
    keep.push_back(&it->second);
    index_.push_back(static_cast<std::int32_t>(it->second.live_row));
  }
  live_keys_.clear();
  if (keep.empty()) return;
  const auto h = static_cast<std::size_t>(head_->hidden());
  const TensorView rows = head_->feature_input(static_cast<std::int64_t>(keep.size()));
  backend_->copy_to_device(gather_index_.data(), index_.data(), index_.size() * sizeof(std::int32_t));
  backend_->gather_rows(live_tensor_, gather_index_.view(DType::kI32, {static_cast<std::int64_t>(index_.size())}), rows);
  staging_.resize(keep.size() * h);
  backend_->copy_to_host(staging_.data(), rows.data, staging_.size() * sizeof(float));
  for (std::size_t i = 0; i < keep.size(); ++i) {
    keep[i]->row.assign(staging_.begin() + static_cast<std::ptrdiff_t>(i * h),
                        staging_.begin() + static_cast<std::ptrdiff_t>((i + 1) * h));
  }
}

void MedusaProposer::fill_features(const std::vector<Item>& items) {
  const auto h = static_cast<std::size_t>(head_->hidden());
  const TensorView features = head_->feature_input(static_cast<std::int64_t>(items.size()));
  // Host rows first, in one upload of the whole block (live rows' slots are overwritten next).
  bool any_host = false;
  for (const Item& it : items) any_host = any_host || !it.s->live;
  if (any_host) {
    staging_.assign(items.size() * h, 0.0f);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].s->live) continue;
      std::copy(items[i].s->row.begin(), items[i].s->row.end(), staging_.begin() + static_cast<std::ptrdiff_t>(i * h));
    }
    backend_->copy_to_device(features.data, staging_.data(), staging_.size() * sizeof(float));
  }
  // Live rows: one gather when every row is live, else a copy per run of live rows.
  index_.clear();
  bool all_live = true;
  for (const Item& it : items) {
    index_.push_back(it.s->live ? static_cast<std::int32_t>(it.s->live_row) : -1);
    all_live = all_live && it.s->live;
  }
  if (all_live) {
    backend_->copy_to_device(gather_index_.data(), index_.data(), index_.size() * sizeof(std::int32_t));
    backend_->gather_rows(live_tensor_, gather_index_.view(DType::kI32, {static_cast<std::int64_t>(index_.size())}),
                          features);
    return;
  }
  for (std::size_t i = 0; i < index_.size(); ++i) {
    if (index_[i] < 0) continue;
    const auto r = static_cast<std::int64_t>(i);
    backend_->copy(live_tensor_.slice0(index_[i], index_[i] + 1), features.slice0(r, r + 1));
  }
}

std::int32_t MedusaProposer::draft_from(const TensorView& logits, std::span<const std::int32_t> greedy_ids,
                                        std::size_t i, ProposalRequest& p) {
  if (!picker_.probabilistic()) return greedy_ids[i] >= 0 ? head_->to_target_id(greedy_ids[i]) : -1;
  // q over the target vocabulary: the scaled logits at their target ids, nothing elsewhere.
  const auto v = static_cast<std::size_t>(head_->out_vocab());
  if (i == 0) {
    logits_host_.resize(static_cast<std::size_t>(logits.dim(0)) * v);
    backend_->copy_to_host(logits_host_.data(), logits.data, logits_host_.size() * sizeof(float));
  }
  target_row_.assign(static_cast<std::size_t>(picker_.vocab()), -std::numeric_limits<float>::infinity());
  for (std::size_t j = 0; j < v; ++j) {
    target_row_[static_cast<std::size_t>(head_->to_target_id(static_cast<std::int32_t>(j)))] =
        logits_host_[i * v + j] * head_->logit_scale();
  }
  return picker_.pick(target_row_, p);
}

absl::Status MedusaProposer::propose(std::span<ProposalRequest> batch) {
  std::vector<Item> items;
  for (ProposalRequest& p : batch) {
    auto it = states_.find(p.key);
    if (it == states_.end()) {
      p.status = absl::FailedPreconditionError(str_cat("medusa proposer: request key ", p.key, " was never added"));
      continue;
    }
    // Drafts come from the state of the position that produced the newest token.
    const auto from = static_cast<std::int32_t>(p.tokens.size()) - 2;
    if (p.max_drafts <= 0 || from < 0 || it->second.position != from) continue;
    items.push_back({&p, &it->second, std::min(p.max_drafts, k_)});
  }
  if (items.empty()) return absl::OkStatus();
  // Longest budgets first, so head i runs over a prefix of the rows.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.drafts > b.drafts; });
  fill_features(items);
  for (std::int32_t head = 0; head < items.front().drafts; ++head) {
    std::size_t rows = 0;
    while (rows < items.size() && items[rows].drafts > head) ++rows;
    const TensorView logits = head_->forward(head, static_cast<std::int64_t>(rows));
    const std::span<const std::int32_t> ids =
        picker_.probabilistic() ? std::span<const std::int32_t>() : picker_.argmax_on_device(logits);
    for (std::size_t i = 0; i < rows; ++i) {
      Item& it = items[i];
      if (it.stopped) continue;
      const std::int32_t t = draft_from(logits, ids, i, *it.p);
      if (t < 0) {
        it.stopped = true;  // drafts are a prefix: none after a head without a pick
        continue;
      }
      it.p->drafts->push_back(t);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ProposerHandoff> MedusaProposer::export_state(RequestKey key) const {
  auto it = states_.find(key);
  if (it == states_.end()) return absl::NotFoundError(str_cat("medusa proposer: no state for request key ", key));
  const State& s = it->second;
  ProposerHandoff h;
  h.feature_width = head_->hidden();
  if (s.position < 0) return h;  // nothing to hand over: the decode side's first step drafts nothing
  if (s.live) {
    h.feature_rows.resize(static_cast<std::size_t>(head_->hidden()));
    backend_->copy_to_host(h.feature_rows.data(), live_tensor_.slice0(s.live_row, s.live_row + 1).data,
                           h.feature_rows.size() * sizeof(float));
  } else {
    h.feature_rows = s.row;
  }
  return h;
}

absl::Status MedusaProposer::import_state(RequestKey key, const ProposerHandoff& h, std::span<const std::int32_t> tokens) {
  const auto width = static_cast<std::size_t>(head_->hidden());
  if (h.kv_positions != 0 || !h.kv_blocks.empty() || h.feature_width != head_->hidden() ||
      (h.feature_rows.size() != width && !h.feature_rows.empty())) {
    return absl::InvalidArgumentError(str_cat("medusa hand-off: ", h.kv_positions, " KV positions, ",
                                              h.feature_rows.size(), " floats of width ", h.feature_width,
                                              "; Medusa takes no KV and one row of the target's ", width,
                                              " hidden floats"));
  }
  auto it = states_.find(key);
  if (it == states_.end()) return absl::NotFoundError(str_cat("medusa hand-off: request key ", key, " was never added"));
  State s;
  if (!h.feature_rows.empty() && tokens.size() >= 2) {
    s.position = static_cast<std::int32_t>(tokens.size()) - 2;  // the last prompt position
    s.row = h.feature_rows;
  }
  it->second = std::move(s);
  return absl::OkStatus();
}

}  // namespace baton
