#include "engine/step_batch.h"

#include <algorithm>
#include <cstring>

#include "common/status.h"

namespace baton {

ForwardBatch& StepBatch::build(std::span<const ScheduledChunk> chunks, const TargetStateSpec& states) {
  ForwardBatch& batch = batch_;  // reused: its vectors keep their capacity from step to step
  batch.sequences.clear();
  batch.on_layer_written = nullptr;
  const std::size_t n = chunks.size();
  logits_indices_.resize(n);
  verify_tokens_.resize(n);
  logits_row_.assign(n, 0);
  token_row_.assign(n, 0);
  num_logits_.assign(n, 0);
  num_tokens_.assign(n, 0);
  std::size_t logits_row = 0, token_row = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const ScheduledChunk& c = chunks[i];
    const Request* r = c.request;
    ForwardSequence s;
    std::vector<std::int32_t>& indices = logits_indices_[i];
    indices.clear();
    if (c.num_drafts > 0) {
      // Verification: the pending token and the drafts, with logits at every one of them.
      verify_tokens_[i].assign(1, r->tokens[static_cast<std::size_t>(c.start)]);
      verify_tokens_[i].insert(verify_tokens_[i].end(), r->drafts.begin(), r->drafts.end());
      for (std::int32_t j = 0; j <= c.num_drafts; ++j) indices.push_back(j);
      s.tokens = verify_tokens_[i];
    } else {
      if (c.samples) indices.push_back(c.num_tokens - 1);
      s.tokens = std::span<const std::int32_t>(r->tokens).subspan(static_cast<std::size_t>(c.start),
                                                                  static_cast<std::size_t>(c.num_tokens));
    }
    s.start_position = c.start;
    s.block_table = r->blocks.blocks();
    s.state_group = r->state_group;
    s.state_slot = c.start == 0 ? -1 : r->state_slot;
    s.logits_indices = indices;
    batch.sequences.push_back(s);
    logits_row_[i] = logits_row;
    token_row_[i] = token_row;
    num_logits_[i] = static_cast<std::int32_t>(indices.size());
    num_tokens_[i] = c.num_tokens;
    logits_row += indices.size();
    token_row += static_cast<std::size_t>(c.num_tokens);
  }
  states_ = states;
  batch.capture_layer_inputs.assign(states.layer_inputs.begin(), states.layer_inputs.end());
  batch.capture_final_hidden = states.final_hidden;
  return batch;
}

void host_row_ranges(std::span<const std::size_t> first_row, std::span<const std::int32_t> num_rows,
                     std::span<const char> on_device, std::vector<RowRange>& out) {
  out.clear();
  for (std::size_t i = 0; i < first_row.size(); ++i) {
    if (num_rows[i] == 0 || on_device[i] != 0) continue;
    const std::size_t end = first_row[i] + static_cast<std::size_t>(num_rows[i]);
    if (!out.empty() && out.back().end == first_row[i]) {
      out.back().end = end;
    } else {
      out.push_back(RowRange{first_row[i], end});
    }
  }
}

absl::Status StepBatch::allocate(Backend& backend, std::int32_t max_num_logits) {
  return picks_.allocate(backend, max_num_logits);
}

void StepBatch::fetch(const ForwardOutput& out, Backend& backend, std::int32_t vocab,
                      std::span<const SampleRowParams> device) {
  vocab_ = vocab;
  device_.assign(device.begin(), device.end());
  on_device_.resize(device_.size());
  for (std::size_t i = 0; i < device_.size(); ++i) on_device_[i] = device_[i].temperature >= 0.0f ? 1 : 0;
  const auto num_logits = static_cast<std::size_t>(out.logits.numel());
  if (backend.host_reads_device_memory()) {
    // Read in place (the rows are the model's workspace, valid until its next forward, which
    // comes after the engine has used them): a batch-32 step of a 32k vocabulary skips 4 MB.
    backend.synchronize();
    logits_ = std::span<const float>(out.logits.ptr<const float>(), num_logits);
  } else {
    // Only the rows the host samples, one copy per run of consecutive such chunks.
    host_logits_.resize(num_logits);
    const auto v = static_cast<std::size_t>(vocab);
    host_row_ranges(logits_row_, num_logits_, on_device_, host_rows_);
    for (const RowRange& rows : host_rows_) {
      backend.copy_to_host(host_logits_.data() + rows.begin * v, out.logits.ptr<const float>() + rows.begin * v,
                           (rows.end - rows.begin) * v * sizeof(float));
    }
    logits_ = host_logits_;
  }
  // The captured states stay where the forward wrote them (the proposer reads them there).
  ++forward_id_;
  state_tensors_ = out.layer_inputs;
  if (states_.final_hidden) state_tensors_.push_back(out.final_hidden);
}

void StepBatch::pick_on_device(const ForwardOutput& out, Backend& backend) {
  step_picks_ = {};
  bool any = false, any_sampled = false, any_host = false;
  for (std::size_t i = 0; i < device_.size(); ++i) {
    if (num_logits_[i] == 0) continue;
    any_host |= on_device_[i] == 0;
    if (on_device_[i] == 0) continue;
    any = true;
    any_sampled |= device_[i].temperature > 1e-5f;
  }
  if (!any) return;
  const std::int64_t rows = out.logits.numel() / std::max<std::int64_t>(vocab_, 1);
  const TensorView ids = picks_.ids(rows);
  // argmax_rows() reads every row; sample_rows() skips the host's rows (temperature < 0) and takes
  // greedy rows by the same argmax, so it also serves a greedy batch with host rows in it.
  if (any_sampled || (any_host && backend.samples_rows())) {
    // Row j of a chunk decides the token at its position + j (a verification's rows follow the
    // pending token).
    BATON_CHECK(backend.samples_rows(), "pick_on_device: sampled chunks flagged on ", backend.describe());
    row_params_.assign(static_cast<std::size_t>(rows), SampleRowParams{});
    for (std::size_t i = 0; i < device_.size(); ++i) {
      if (on_device_[i] == 0) continue;
      for (std::int32_t j = 0; j < num_logits_[i]; ++j) {
        SampleRowParams& p = row_params_[logits_row_[i] + static_cast<std::size_t>(j)];
        p = device_[i];
        p.position += j;
      }
    }
    backend.sample_rows(out.logits, row_params_, ids);
  } else {
    backend.argmax_rows(out.logits, ids);
  }
  step_picks_ = picks_.fetch(rows);
}

std::span<const std::int32_t> StepBatch::device_tokens(std::size_t chunk) const {
  if (step_picks_.empty() || on_device_[chunk] == 0) return {};
  return step_picks_.subspan(logits_row_[chunk], static_cast<std::size_t>(num_logits_[chunk]));
}

std::span<const float> StepBatch::logits(std::size_t chunk) const {
  const auto v = static_cast<std::size_t>(vocab_);
  return logits_.subspan(logits_row_[chunk] * v, static_cast<std::size_t>(num_logits_[chunk]) * v);
}

TargetStateRows StepBatch::states(std::size_t chunk) const {
  if (state_tensors_.empty()) return {};
  return TargetStateRows{state_tensors_, static_cast<std::int64_t>(token_row_[chunk]), forward_id_};
}

}  // namespace baton
