#include "engine/spec/drafting_proposer.h"

#include <algorithm>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton {

std::unique_ptr<DraftingProposer::State> DraftingProposer::new_state() const {
  return std::make_unique<State>(block_size_);
}

absl::Status DraftingProposer::init_kv(Backend& backend, const KvCacheLayout& layout, const ProposerContext& ctx,
                                       std::int32_t k) {
  k_ = k;
  budget_ = ctx.max_num_batched_tokens;
  max_seqs_ = ctx.max_num_seqs;
  block_size_ = ctx.block_size;
  // As many positions as the target's pool holds, plus every sequence's drafts (rounded up, and
  // one block for the partial block each sequence can leave at both ends).
  const KvCacheLayout target_layout{ctx.target_config->num_layers, ctx.target_config->num_kv_heads,
                                    ctx.target_config->head_dim, ctx.block_size, ctx.kv_cache_dtype};
  const std::int32_t blocks = KvCache::blocks_for_budget(target_layout, ctx.kv_cache_bytes) +
                              ctx.max_num_seqs * (BlockTable::blocks_for(k + 1, ctx.block_size) + 1);
  // The draft's KV is stored like the target's.
  KvCacheLayout draft_layout = layout;
  draft_layout.dtype = ctx.kv_cache_dtype;
  BATON_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(backend, draft_layout, blocks, ctx.kv_memory, "draft"));
  cache_ = std::make_unique<KvCache>(std::move(cache));
  pool_ = std::make_unique<KvBlockPool>(blocks, ctx.block_size, key_lead());
  backend_ = &backend;
  return absl::OkStatus();
}

absl::Status DraftingProposer::init_sampling(const SpeculativeConfig& config, const ProposerContext& ctx,
                                             std::int32_t max_rows) {
  BATON_RETURN_IF_ERROR(picker_.init(config, ctx, max_rows > 0 ? max_rows : ctx.max_num_seqs));
  probabilistic_ = picker_.probabilistic();
  vocab_ = picker_.vocab();
  return absl::OkStatus();
}

void DraftingProposer::add_request(RequestKey key, std::span<const std::int32_t> /*prompt*/) {
  // A reserved (decode-side) request already has its state.
  if (!states_.contains(key)) states_.emplace(key, new_state());
}

void DraftingProposer::remove_request(RequestKey key, bool /*finished*/) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  it->second->table.release_all(*pool_);
  states_.erase(it);
}

void DraftingProposer::reset_request(RequestKey key) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  it->second->table.release_all(*pool_);
  it->second = new_state();
}

DraftingProposer::State* DraftingProposer::state_of(RequestKey key) {
  auto it = states_.find(key);
  return it == states_.end() ? nullptr : it->second.get();
}

const DraftingProposer::State* DraftingProposer::state_of(RequestKey key) const {
  auto it = states_.find(key);
  return it == states_.end() ? nullptr : it->second.get();
}

bool DraftingProposer::reserve_positions(Work& w, std::int32_t positions) {
  if (w.s->table.grow_to(*pool_, positions)) return true;
  if (kv_exhausted_++ == 0) {
    spdlog::warn("{} proposer: its KV pool ({} blocks) is full; requests get no drafts until blocks free up", name(),
                 pool_->num_blocks());
  }
  w.ok = false;
  return false;
}

absl::Status DraftingProposer::run_catch_ups(std::span<CatchUp> items, const CatchUpForward& forward) {
  std::vector<std::size_t> done(items.size(), 0);  // positions of each item already run
  std::vector<std::int32_t> last_index;
  last_index.reserve(items.size());
  std::vector<CatchUpSlice> slices;
  std::vector<Work*> owners;
  for (bool pending = true; pending;) {
    pending = false;
    ForwardBatch batch;
    slices.clear();
    last_index.clear();
    owners.clear();
    std::int32_t budget = budget_;
    for (std::size_t i = 0; i < items.size(); ++i) {
      CatchUp& c = items[i];
      const std::size_t total = c.tokens.size();
      if (!c.work->ok || done[i] >= total) continue;
      if (budget == 0 || static_cast<std::int32_t>(batch.sequences.size()) == max_seqs_) {
        pending = true;
        continue;
      }
      const auto m = static_cast<std::int32_t>(std::min<std::size_t>(total - done[i], static_cast<std::size_t>(budget)));
      const std::int32_t start = c.start + static_cast<std::int32_t>(done[i]);
      if (!reserve_positions(*c.work, start + m)) continue;
      ForwardSequence seq;
      seq.tokens = c.tokens.subspan(done[i], static_cast<std::size_t>(m));
      seq.start_position = start;
      seq.block_table = c.work->s->table.blocks();
      last_index.push_back(m - 1);
      const bool last_chunk = done[i] + static_cast<std::size_t>(m) == total;
      if (last_chunk) {
        seq.logits_indices = std::span<const std::int32_t>(&last_index.back(), 1);
        owners.push_back(c.work);
      } else {
        pending = true;
      }
      batch.sequences.push_back(seq);
      slices.push_back(CatchUpSlice{i, static_cast<std::int32_t>(done[i]), m});
      budget -= m;
    }
    if (batch.sequences.empty()) break;
    BATON_RETURN_IF_ERROR(forward(batch, slices, owners));
    for (const CatchUpSlice& sl : slices) {
      done[sl.item] += static_cast<std::size_t>(sl.count);
      State& s = *items[sl.item].work->s;
      s.computed = std::max(s.computed, items[sl.item].start + static_cast<std::int32_t>(done[sl.item]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BlockId>> DraftingProposer::reserve_state(RequestKey key, std::int32_t prompt_len) {
  if (states_.contains(key)) {
    return absl::AlreadyExistsError(str_cat(name(), " proposer: request key ", key, " already has state"));
  }
  std::unique_ptr<State> s = new_state();
  if (!s->table.grow_to(*pool_, handoff_kv_positions(prompt_len))) {
    return absl::ResourceExhaustedError(str_cat(name(), " proposer: its KV pool has ", pool_->num_available(),
                                                " free blocks, ", BlockTable::blocks_for(handoff_kv_positions(prompt_len), block_size_),
                                                " needed for a prompt of ", prompt_len, " tokens"));
  }
  std::vector<BlockId> blocks(s->table.blocks().begin(), s->table.blocks().end());
  states_.emplace(key, std::move(s));
  return blocks;
}

DraftingProposer::State* DraftingProposer::adopt_cached_blocks(RequestKey key, std::span<const std::int32_t> tokens,
                                                               std::uint64_t salt, std::int32_t positions) {
  if (state_of(key) == nullptr) return nullptr;
  if (state_of(key)->table.num_blocks() > 0) reset_request(key);  // an admission holds no KV yet
  State& s = *state_of(key);
  const std::vector<BlockId> hit = pool_->match_prefix(tokens, positions / block_size_, salt);
  s.table.set_salt(salt);
  s.table.adopt_prefix(hit);
  s.caches = true;
  s.computed = static_cast<std::int32_t>(hit.size()) * block_size_;
  return &s;
}

std::vector<BlockId> DraftingProposer::blocks_for_positions(const State& s, std::int32_t positions) {
  const auto n = static_cast<std::size_t>(BlockTable::blocks_for(positions, s.table.block_size()));
  return {s.table.blocks().begin(), s.table.blocks().begin() + static_cast<std::ptrdiff_t>(n)};
}

absl::Status DraftingProposer::adopt_handoff_kv(RequestKey key, const ProposerHandoff& h, State** state) {
  State* s = state_of(key);
  if (s == nullptr) {
    return absl::FailedPreconditionError(str_cat(name(), " proposer: no reserved state for request key ", key));
  }
  if (h.kv_positions < 0 || h.kv_positions > s->table.capacity_tokens()) {
    return absl::InvalidArgumentError(str_cat(name(), " hand-off: KV for ", h.kv_positions, " positions but ",
                                              s->table.capacity_tokens(), " were reserved"));
  }
  if (h.kv_blocks.size() != static_cast<std::size_t>(BlockTable::blocks_for(h.kv_positions, block_size_))) {
    return absl::InvalidArgumentError(str_cat(name(), " hand-off: ", h.kv_blocks.size(), " KV blocks for ",
                                              h.kv_positions, " positions of ", block_size_));
  }
  s->table.shrink_to(*pool_, h.kv_positions);
  s->computed = h.kv_positions;
  *state = s;
  return absl::OkStatus();
}

}  // namespace baton
