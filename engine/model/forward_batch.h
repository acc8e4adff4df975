// ForwardBatch: one forward pass's input — a batch of sequences, each adding q_len >= 1 new tokens
// at known positions over its block table. Prefill (a prompt or a chunk of one), decode (one
// token) and speculative verification (k + 1 tokens) are all the same thing here.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/kv/block_pool.h"
#include "kernels/tensor.h"

namespace baton {

struct ForwardSequence {
  std::span<const std::int32_t> tokens;          // the new tokens
  std::int32_t start_position = 0;               // position of tokens[0]; earlier KV is cached
  std::span<const BlockId> block_table;          // covers positions [0, start_position + tokens.size())
  std::span<const std::int32_t> logits_indices;  // which new tokens (0-based) get logits
  // Models with linear-attention layers only (engine/kv/state_cache.h): the sequence's state
  // group, and the slot holding its state before tokens[0] (-1: the zero state, which a sequence
  // starting at position 0 must use and no other may). The states after its last
  // min(tokens, slots) tokens go to slots 0.. in order; with tokens <= slots, slot j holds the
  // state after tokens[j].
  std::int32_t state_group = -1;
  std::int32_t state_slot = -1;
};

struct ForwardBatch {
  std::vector<ForwardSequence> sequences;
  // Hidden states to return for every new token: the input of these decoder layers (the residual
  // stream entering layer i; EAGLE-3's aux states), and optionally the final norm's output.
  std::vector<std::int32_t> capture_layer_inputs;
  bool capture_final_hidden = false;
  // Called after KV layer i (the i-th attention layer: every decoder layer but a hybrid's
  // linear-attention ones) has written this batch's keys and values (and the backend has finished
  // doing so), before the next layer starts: a transport can push KV layer i's blocks while the
  // next layer computes. Must not touch the forward's buffers or call into the model.
  std::function<void(std::int32_t layer)> on_layer_written;

  std::int64_t num_tokens() const;
  std::int64_t num_logits() const;
};

// Views into the model's workspace on the backend's device; valid until the next forward().
struct ForwardOutput {
  TensorView logits;                    // [num_logits, vocab] F32, rows in (sequence, logits_indices) order
  std::vector<TensorView> layer_inputs;  // one per capture_layer_inputs entry: [num_tokens, hidden]
  TensorView final_hidden;               // [num_tokens, hidden] when capture_final_hidden
};

inline std::int64_t ForwardBatch::num_tokens() const {
  std::int64_t n = 0;
  for (const auto& s : sequences) n += static_cast<std::int64_t>(s.tokens.size());
  return n;
}

inline std::int64_t ForwardBatch::num_logits() const {
  std::int64_t n = 0;
  for (const auto& s : sequences) n += static_cast<std::int64_t>(s.logits_indices.size());
  return n;
}

}  // namespace baton
