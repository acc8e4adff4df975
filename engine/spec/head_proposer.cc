#include "engine/spec/head_proposer.h"

#include <algorithm>
#include <limits>

#include "common/status.h"

namespace baton {

struct HeadProposer::Work {
  ProposalRequest* p;
  State* s;
  std::int32_t target_end;       // catch up head positions [s->valid, target_end)
  std::vector<float> feature;    // the head's output at its latest position (drafting input)
  bool ok = true;
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
  p->k_ = config.num_speculative_tokens > 0 ? config.num_speculative_tokens : p->head_->num_modules();
  p->budget_ = ctx.max_num_batched_tokens;
  p->max_seqs_ = ctx.max_num_seqs;
  p->block_size_ = ctx.block_size;
  p->width_ = p->head_->target_feature_width();
  p->vocab_ = ctx.target_config->vocab_size;
  p->probabilistic_ = config.draft_sample_method == DraftSampleMethod::kProbabilistic;
  p->eos_ = ctx.target_config->eos_token_ids;
  const KvCacheLayout target_layout{ctx.target_config->num_layers, ctx.target_config->num_kv_heads,
                                    ctx.target_config->head_dim, ctx.block_size, ctx.backend->activation_dtype()};
  const std::int32_t blocks = KvCache::blocks_for_budget(target_layout, ctx.kv_cache_bytes) +
                              ctx.max_num_seqs * BlockTable::blocks_for(p->k_ + 1, ctx.block_size);
  BATON_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*ctx.backend, p->head_->kv_layout(), blocks));
  p->cache_ = std::make_unique<KvCache>(std::move(cache));
  p->pool_ = std::make_unique<KvBlockPool>(blocks, ctx.block_size);
  return p;
}

void HeadProposer::add_request(RequestKey key, std::span<const std::int32_t> /*prompt*/) {
  states_.try_emplace(key, block_size_);
}

void HeadProposer::remove_request(RequestKey key, bool /*finished*/) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  it->second.table.release_all(*pool_);
  states_.erase(it);
}

void HeadProposer::observe(RequestKey key, std::int32_t start, std::span<const float> rows, std::int32_t n,
                           std::int32_t n_valid) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  State& s = it->second;
  BATON_CHECK(static_cast<std::int64_t>(rows.size()) == static_cast<std::int64_t>(n) * width_, "observe: ",
              rows.size(), " floats for ", n, " rows of ", width_);
  const std::int32_t expected = s.valid + pending_rows(s);
  if (start < expected) {
    // The target recomputed earlier positions (preemption by recompute): forget what follows.
    if (start < s.valid) {
      s.valid = start;
      s.pending.clear();
      s.last_row.clear();
    } else {
      s.pending.resize(static_cast<std::size_t>(start - s.valid) * static_cast<std::size_t>(width_));
    }
  }
  BATON_CHECK(start == s.valid + pending_rows(s), "observe: target states for position ", start, " but ",
              s.valid + pending_rows(s), " expected");
  s.pending.insert(s.pending.end(), rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(n_valid) * width_);
}

std::int32_t HeadProposer::pick(std::span<const float> logits, ProposalRequest& p) {
  if (!probabilistic_) {
    const auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    return head_->to_target_id(best);
  }
  // q over the target vocabulary: the head's logits at their target ids, nothing elsewhere, then
  // the request's own processing (REFERENCE §2: the same processing defines q).
  row_.assign(static_cast<std::size_t>(vocab_), -std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    row_[static_cast<std::size_t>(head_->to_target_id(static_cast<std::int32_t>(i)))] = logits[i];
  }
  const auto output = p.tokens.subspan(static_cast<std::size_t>(p.prompt_len));
  history_.assign(output.begin(), output.end());
  history_.insert(history_.end(), p.drafts->begin(), p.drafts->end());
  probs_.resize(static_cast<std::size_t>(vocab_));
  sampler_.target_probs(row_, *p.sampling, TokenHistory{p.tokens.first(static_cast<std::size_t>(p.prompt_len)), history_},
                        eos_, probs_);
  p.draft_probs->insert(p.draft_probs->end(), probs_.begin(), probs_.end());
  return Sampler::draw(probs_, *p.rng);
}

absl::Status HeadProposer::catch_up(std::vector<Work>& work) {
  const auto out_vocab = static_cast<std::size_t>(head_->out_vocab());
  const auto hidden = static_cast<std::size_t>(head_->hidden());
  std::vector<std::int32_t> last_index;
  last_index.reserve(work.size());
  std::vector<float> features;
  for (bool pending = true; pending;) {
    pending = false;
    ForwardBatch batch;
    std::vector<Work*> owners;
    features.clear();
    last_index.clear();
    std::int32_t budget = budget_;
    for (Work& wk : work) {
      State& s = *wk.s;
      if (!wk.ok || s.valid >= wk.target_end) continue;
      if (budget == 0 || static_cast<std::int32_t>(batch.sequences.size()) == max_seqs_) {
        pending = true;
        continue;
      }
      const std::int32_t m = std::min(wk.target_end - s.valid, budget);
      if (!s.table.grow_to(*pool_, s.valid + m)) {
        wk.ok = false;  // out of head KV: no drafts for this request this step
        continue;
      }
      ForwardSequence seq;
      // Head position p consumes token p + 1.
      seq.tokens = wk.p->tokens.subspan(static_cast<std::size_t>(s.valid) + 1, static_cast<std::size_t>(m));
      seq.start_position = s.valid;
      seq.block_table = s.table.blocks();
      last_index.push_back(m - 1);
      if (s.valid + m == wk.target_end) seq.logits_indices = std::span<const std::int32_t>(&last_index.back(), 1);
      batch.sequences.push_back(seq);
      owners.push_back(&wk);
      features.insert(features.end(), s.pending.begin(), s.pending.begin() + static_cast<std::ptrdiff_t>(m) * width_);
      budget -= m;
      if (s.valid + m < wk.target_end) pending = true;
    }
    if (batch.sequences.empty()) break;
    // Every module learns the same positions; module 0's output gives the first draft.
    for (std::int32_t mi = head_->num_modules() - 1; mi >= 0; --mi) {
      BATON_ASSIGN_OR_RETURN(HeadOutput out, head_->forward(mi, batch, features, /*from_target=*/true, *cache_));
      if (mi != 0) continue;
      std::size_t row = 0;
      for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
        if (batch.sequences[i].logits_indices.empty()) continue;
        Work& wk = *owners[i];
        wk.p->drafts->push_back(pick(std::span<const float>(out.logits).subspan(row * out_vocab, out_vocab), *wk.p));
        wk.feature.assign(out.outputs.begin() + static_cast<std::ptrdiff_t>(row * hidden),
                          out.outputs.begin() + static_cast<std::ptrdiff_t>((row + 1) * hidden));
        ++row;
      }
    }
    for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
      State& s = *owners[i]->s;
      const auto m = static_cast<std::int32_t>(batch.sequences[i].tokens.size());
      const auto consumed = s.pending.begin() + static_cast<std::ptrdiff_t>(m) * width_;
      s.last_row.assign(consumed - width_, consumed);
      s.pending.erase(s.pending.begin(), consumed);
      s.valid += m;
    }
  }
  return absl::OkStatus();
}

absl::Status HeadProposer::draft_steps(std::vector<Work>& work) {
  const auto out_vocab = static_cast<std::size_t>(head_->out_vocab());
  const auto hidden = static_cast<std::size_t>(head_->hidden());
  static constexpr std::int32_t kLast[1] = {0};
  std::vector<float> features;
  for (std::int32_t step = 1; step < k_; ++step) {
    ForwardBatch batch;
    std::vector<Work*> owners;
    features.clear();
    for (Work& wk : work) {
      if (!wk.ok || static_cast<std::int32_t>(wk.p->drafts->size()) != step || step >= wk.p->max_drafts) continue;
      if (static_cast<std::int32_t>(batch.sequences.size()) == max_seqs_) break;
      State& s = *wk.s;
      const std::int32_t pos = wk.target_end - 1 + step;  // after the last catch-up position
      if (!s.table.grow_to(*pool_, pos + 1)) {
        wk.ok = false;
        continue;
      }
      ForwardSequence seq;
      seq.tokens = std::span<const std::int32_t>(&wk.p->drafts->back(), 1);
      seq.start_position = pos;
      seq.block_table = s.table.blocks();
      seq.logits_indices = std::span<const std::int32_t>(kLast, 1);
      batch.sequences.push_back(seq);
      owners.push_back(&wk);
      features.insert(features.end(), wk.feature.begin(), wk.feature.end());
    }
    if (batch.sequences.empty()) break;
    const std::int32_t module = step % head_->num_modules();
    BATON_ASSIGN_OR_RETURN(HeadOutput out, head_->forward(module, batch, features, /*from_target=*/false, *cache_));
    for (std::size_t i = 0; i < owners.size(); ++i) {
      Work& wk = *owners[i];
      wk.p->drafts->push_back(pick(std::span<const float>(out.logits).subspan(i * out_vocab, out_vocab), *wk.p));
      wk.feature.assign(out.outputs.begin() + static_cast<std::ptrdiff_t>(i * hidden),
                        out.outputs.begin() + static_cast<std::ptrdiff_t>((i + 1) * hidden));
    }
  }
  return absl::OkStatus();
}

absl::Status HeadProposer::propose(std::span<ProposalRequest> batch) {
  std::vector<Work> work;
  work.reserve(batch.size());
  for (ProposalRequest& p : batch) {
    auto it = states_.find(p.key);
    if (it == states_.end() || p.max_drafts <= 0) continue;
    State& s = it->second;
    const auto n = static_cast<std::int32_t>(p.tokens.size());
    // Head positions up to n - 2 pair a final target state with a known next token.
    const std::int32_t target_end = n - 1;
    if (target_end < 1 || s.valid + pending_rows(s) < target_end) continue;  // states not all here yet
    if (s.valid == target_end && !s.last_row.empty()) {
      // Nothing new since the last call: recompute the last position to draft again.
      s.pending.insert(s.pending.begin(), s.last_row.begin(), s.last_row.end());
      --s.valid;
    }
    s.table.shrink_to(*pool_, s.valid);  // drop KV written while drafting last time
    work.push_back({&p, &s, target_end, {}});
  }
  BATON_RETURN_IF_ERROR(catch_up(work));
  BATON_RETURN_IF_ERROR(draft_steps(work));
  for (Work& wk : work) {
    if (static_cast<std::int32_t>(wk.p->drafts->size()) > wk.p->max_drafts) {
      wk.p->drafts->resize(static_cast<std::size_t>(wk.p->max_drafts));
      if (probabilistic_) wk.p->draft_probs->resize(static_cast<std::size_t>(wk.p->max_drafts * vocab_));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
