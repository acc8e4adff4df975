#include "engine/model/batch_plan.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

bool fits_shape(const ForwardBatch& batch, const GraphShape& shape) {
  const std::int32_t q_max = shape.tokens_per_seq, l = shape.logits_per_seq;
  if (batch.sequences.empty() || static_cast<std::int64_t>(batch.sequences.size()) > shape.num_seqs || q_max < 1 ||
      (l != 0 && l != 1 && l != q_max)) {
    return false;
  }
  for (const ForwardSequence& s : batch.sequences) {
    const auto q = static_cast<std::int32_t>(s.tokens.size());
    const std::span<const std::int32_t> idx = s.logits_indices;
    if (q < 1 || q > q_max) return false;
    if (l == q_max) {  // every token, in order
      if (static_cast<std::int32_t>(idx.size()) != q) return false;
      for (std::int32_t j = 0; j < q; ++j) {
        if (idx[static_cast<std::size_t>(j)] != j) return false;
      }
    } else if (l == 1) {  // the last token
      if (idx.size() != 1 || idx[0] != q - 1) return false;
    } else if (!idx.empty()) {
      return false;
    }
  }
  return true;
}

absl::Status BatchPlan::allocate(Backend& backend, const BatchLimits& limits) {
  backend_ = &backend;
  limits_ = limits;
  max_blocks_per_seq_ = (limits.max_model_len + limits.block_size - 1) / limits.block_size;
  const std::size_t elements = 4 * static_cast<std::size_t>(limits.max_num_tokens) +
                               static_cast<std::size_t>(std::max(1, limits.max_num_logits)) +
                               static_cast<std::size_t>(limits.max_num_seqs) * static_cast<std::size_t>(max_blocks_per_seq_) +
                               4 * static_cast<std::size_t>(limits.max_num_seqs);
  BATON_ASSIGN_OR_RETURN(device_, backend.allocate(elements * sizeof(std::int32_t)));
  for (DeviceBuffer& slot : staging_) {
    BATON_ASSIGN_OR_RETURN(slot, backend.allocate_staging(elements * sizeof(std::int32_t)));
  }
  return absl::OkStatus();
}

TensorView BatchPlan::region(Region r, std::initializer_list<std::int64_t> shape) const {
  return TensorView::contiguous(static_cast<std::int32_t*>(device_.data()) + offsets_[static_cast<int>(r)], DType::kI32,
                                shape, backend_->device());
}

AttentionBatch BatchPlan::attention() const {
  AttentionBatch a;
  a.positions = positions();
  a.token_seq = region(Region::kTokenSeq, {num_tokens()});
  a.block_tables = region(Region::kBlockTables, {num_seqs_, max_blocks_per_seq_});
  a.num_tokens = num_tokens();
  a.max_context_len = max_context_len_;
  return a;
}

RecurrentBatch BatchPlan::recurrent() const {
  RecurrentBatch r;
  r.seqs = region(Region::kRecurrent, {num_seqs_, 4});
  r.slots = std::max(1, state_slots_);
  return r;
}

absl::Status BatchPlan::plan(const ForwardBatch& batch, std::int32_t num_blocks,
                             const std::optional<GraphShape>& padded, const RecurrentLimits& recurrent) {
  const auto real_seqs = static_cast<std::int64_t>(batch.sequences.size());
  if (real_seqs == 0) return absl::InvalidArgumentError("forward batch has no tokens");
  std::int64_t num_tokens = batch.num_tokens();
  std::int64_t num_logits = batch.num_logits();
  num_seqs_ = real_seqs;
  if (padded) {
    if (num_blocks < 1 || !fits_shape(batch, *padded)) {
      return absl::InvalidArgumentError(str_cat("cannot pad a forward batch of ", real_seqs, " sequences to ",
                                                padded->num_seqs, " sequences of ", padded->tokens_per_seq,
                                                " tokens with logits at ", padded->logits_per_seq));
    }
    num_tokens = padded->num_seqs * padded->tokens_per_seq;
    num_logits = padded->num_seqs * padded->logits_per_seq;
    num_seqs_ = padded->num_seqs;
  }
  if (num_tokens == 0) return absl::InvalidArgumentError("forward batch has no tokens");
  if (num_tokens > limits_.max_num_tokens || num_seqs_ > limits_.max_num_seqs || num_logits > limits_.max_num_logits) {
    return absl::InvalidArgumentError(str_cat("forward batch of ", num_tokens, " tokens, ", num_seqs_, " sequences, ",
                                              num_logits, " logits exceeds the limits (", limits_.max_num_tokens, ", ",
                                              limits_.max_num_seqs, ", ", limits_.max_num_logits, ")"));
  }
  const std::int32_t bs = limits_.block_size;
  h_tokens_.clear();
  h_positions_.clear();
  h_token_seq_.clear();
  h_slots_.clear();
  h_logits_rows_.clear();
  h_recurrent_.clear();
  state_slots_ = recurrent.slots;
  h_block_tables_.assign(static_cast<std::size_t>(num_seqs_ * max_blocks_per_seq_), -1);
  max_context_len_ = 0;
  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const ForwardSequence& seq = batch.sequences[s];
    const auto q_len = static_cast<std::int64_t>(seq.tokens.size());
    const std::int64_t end = seq.start_position + q_len;
    if (q_len == 0 || seq.start_position < 0) {
      return absl::InvalidArgumentError(str_cat("sequence ", s, ": needs at least one new token at a position >= 0"));
    }
    if (end > limits_.max_model_len) {
      return absl::InvalidArgumentError(str_cat("sequence ", s, ": ", end, " tokens exceed max_model_len ", limits_.max_model_len));
    }
    if (static_cast<std::int64_t>(seq.block_table.size()) * bs < end) {
      return absl::InvalidArgumentError(str_cat("sequence ", s, ": block table of ", seq.block_table.size(),
                                                " blocks cannot hold ", end, " positions"));
    }
    for (std::size_t b = 0; b < seq.block_table.size() && b < static_cast<std::size_t>(max_blocks_per_seq_); ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= num_blocks) {
        return absl::InvalidArgumentError(str_cat("sequence ", s, ": block id ", seq.block_table[b], " outside the cache"));
      }
      h_block_tables_[s * static_cast<std::size_t>(max_blocks_per_seq_) + b] = seq.block_table[b];
    }
    const auto base = static_cast<std::int32_t>(h_tokens_.size());
    if (recurrent.groups > 0) {
      if (seq.state_group < 0 || seq.state_group >= recurrent.groups) {
        return absl::InvalidArgumentError(str_cat("sequence ", s, ": state group ", seq.state_group, " outside the ",
                                                  recurrent.groups, " of the recurrent state cache"));
      }
      if (seq.state_slot < -1 || seq.state_slot >= recurrent.slots || (seq.state_slot == -1) != (seq.start_position == 0)) {
        return absl::InvalidArgumentError(str_cat("sequence ", s, ": state slot ", seq.state_slot, " at position ",
                                                  seq.start_position, " (slots 0..", recurrent.slots - 1,
                                                  "; -1, the zero state, exactly at position 0)"));
      }
      for (std::size_t other = 0; other < s; ++other) {
        if (batch.sequences[other].state_group == seq.state_group) {
          return absl::InvalidArgumentError(str_cat("sequences ", other, " and ", s, " share state group ", seq.state_group));
        }
      }
    }
    h_recurrent_.insert(h_recurrent_.end(), {base, static_cast<std::int32_t>(q_len), seq.state_group, seq.state_slot});
    for (std::int64_t i = 0; i < q_len; ++i) {
      const std::int32_t tok = seq.tokens[static_cast<std::size_t>(i)];
      if (tok < 0 || tok >= limits_.vocab_size) {
        return absl::InvalidArgumentError(str_cat("sequence ", s, ": token id ", tok, " outside the vocabulary [0, ",
                                                  limits_.vocab_size, ")"));
      }
      const auto pos = static_cast<std::int32_t>(seq.start_position + i);
      h_tokens_.push_back(tok);
      h_positions_.push_back(pos);
      h_token_seq_.push_back(static_cast<std::int32_t>(s));
      h_slots_.push_back(seq.block_table[static_cast<std::size_t>(pos / bs)] * bs + pos % bs);
    }
    for (std::int32_t idx : seq.logits_indices) {
      if (idx < 0 || idx >= q_len) {
        return absl::InvalidArgumentError(str_cat("sequence ", s, ": logits index ", idx, " outside its ", q_len, " new tokens"));
      }
      h_logits_rows_.push_back(base + idx);
    }
    max_context_len_ = std::max(max_context_len_, end);
  }
  if (padded) {
    const std::int32_t q_len = padded->tokens_per_seq, logits = padded->logits_per_seq;
    // Padding sequences: the shape at positions 0.. of block 0 (every block-table entry 0, so all
    // their reads stay inside the cache), slot -1 so they write no KV.
    for (std::int64_t s = real_seqs; s < padded->num_seqs; ++s) {
      std::fill_n(h_block_tables_.begin() + s * max_blocks_per_seq_, max_blocks_per_seq_, 0);
      const auto base = static_cast<std::int32_t>(h_tokens_.size());
      h_recurrent_.insert(h_recurrent_.end(), {base, q_len, -1, -1});
      for (std::int32_t i = 0; i < q_len; ++i) {
        h_tokens_.push_back(0);
        h_positions_.push_back(i);
        h_token_seq_.push_back(static_cast<std::int32_t>(s));
        h_slots_.push_back(-1);
        if (logits == q_len || (logits == 1 && i == q_len - 1)) h_logits_rows_.push_back(base + i);
      }
    }
    // Fillers of the real sequences shorter than the shape: at position 0 of the sequence, whose key
    // is cached or written by this forward before attention reads it (one key to read, however
    // long the context), slot -1.
    for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
      const ForwardSequence& seq = batch.sequences[s];
      const auto q = static_cast<std::int32_t>(seq.tokens.size());
      for (std::int32_t i = q; i < q_len; ++i) {
        if (logits == q_len) h_logits_rows_.push_back(static_cast<std::int32_t>(h_tokens_.size()));
        h_tokens_.push_back(0);
        h_positions_.push_back(0);
        h_token_seq_.push_back(static_cast<std::int32_t>(s));
        h_slots_.push_back(-1);
      }
    }
    // A graph replays for any context: attention gets the bound, not this batch's longest.
    max_context_len_ = limits_.max_model_len;
  }
  // Pack into the staging slot the forward before last used: its upload has run once its fence
  // has passed (on the CPU at once), and the last forward's may still be in flight.
  const std::size_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % staging_.size();
  backend_->wait_for(staging_fence_[slot]);
  auto* packed = static_cast<std::int32_t*>(staging_[slot].data());
  std::int64_t used = 0;
  const std::vector<std::int32_t>* parts[] = {&h_tokens_, &h_positions_, &h_token_seq_, &h_slots_, &h_logits_rows_,
                                              &h_block_tables_, &h_recurrent_};
  for (int r = 0; r < static_cast<int>(Region::kCount); ++r) {
    offsets_[r] = used;
    std::copy(parts[r]->begin(), parts[r]->end(), packed + used);
    used += static_cast<std::int64_t>(parts[r]->size());
  }
  backend_->copy_to_device(device_.data(), packed, static_cast<std::size_t>(used) * sizeof(std::int32_t));
  staging_fence_[slot] = backend_->fence();
  return absl::OkStatus();
}


}  // namespace baton
