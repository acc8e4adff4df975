// StateCache: the recurrent state of a hybrid model's linear-attention layers (Qwen3-Next's Gated
// DeltaNet), beside the paged KV cache of its attention layers. A request holds one state group
// for its whole life; a group has `slots` slots (1 + k with k speculative tokens), each holding,
// per recurrent layer, the layer's convolution inputs and recurrent matrices after some token.
// A forward reads a sequence's state from the slot its ForwardSequence names and writes the
// states after its last tokens into slots 0.. (RecurrentBatch in kernels/backend.h), so a
// verification step leaves the state after every draft position and the engine keeps the one
// the rejection sampler accepted by naming that slot next time: nothing is recomputed.
//
// ONE allocation laid out [layers, groups, slots, floats_per_slot] F32 (a layer's slot is
// [conv inputs (K - 1) x channels | v_heads x key_dim x value_dim]), so one (layer, group, slot)
// is one contiguous span that a transport can move.
//
// It owns memory only: which group belongs to which request is StateGroupPool's business.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_memory.h"
#include "engine/kv/pool_geometry.h"
#include "engine/kv/pool_memory.h"
#include "kernels/backend.h"

namespace baton {

struct StateCacheLayout {
  std::int32_t num_layers = 0;  // recurrent layers
  std::int64_t conv_floats = 0;       // per layer and slot: (K - 1) * channels
  std::int64_t recurrent_floats = 0;  // per layer and slot: v_heads * key_dim * value_dim
  std::int32_t slots = 1;       // per group: 1 + num_speculative_tokens

  std::int64_t floats_per_slot() const { return conv_floats + recurrent_floats; }
  // Bytes one request's group takes over all layers.
  std::int64_t bytes_per_group() const {
    return static_cast<std::int64_t>(num_layers) * slots * floats_per_slot() * static_cast<std::int64_t>(sizeof(float));
  }
  std::string describe() const;
  friend bool operator==(const StateCacheLayout&, const StateCacheLayout&) = default;
};

class StateCache {
 public:
  // ResourceExhausted naming the layout when num_groups < 1. With a `provider` (CPU backends
  // only) the memory comes from it, asked for under `pool_name` (so that a KV transport can write
  // a peer's state straight into it, as into the KV pools); else from the backend.
  static absl::StatusOr<StateCache> create(Backend& backend, const StateCacheLayout& layout, std::int32_t num_groups,
                                           KvMemoryProvider* provider = nullptr, std::string_view pool_name = "state");

  const StateCacheLayout& layout() const { return layout_; }
  std::int32_t num_groups() const { return num_groups_; }
  // Recurrent layer i's convolution inputs, [groups, slots, conv_floats], and recurrent
  // matrices, [groups, slots, recurrent_floats] (strided views of one buffer).
  TensorView conv(std::int32_t layer) const;
  TensorView recurrent(std::int32_t layer) const;
  // The whole of one (layer, group, slot): [floats_per_slot] F32.
  TensorView slot(std::int32_t layer, std::int32_t group, std::int32_t slot) const;
  // The memory as a transport sees it, and where one (layer, group, slot) lives in it: the bytes a
  // hand-off moves (one slot per recurrent layer: the state after the prompt).
  KvRegion region() const;
  KvSpan span(std::int32_t layer, std::int32_t group, std::int32_t slot) const;
  // The region as (layer, unit) spans, a unit being one slot of one group (group * slots + slot).
  PoolGeometry geometry() const;
  // Copies slot `from` of a group to slot `to` in every layer (the engine's compaction of the
  // accepted state into slot 0, when it wants one).
  void copy_slot(Backend& backend, std::int32_t group, std::int32_t from, std::int32_t to) const;

 private:
  TensorView layer_view(std::int32_t layer) const;  // [groups, slots, floats_per_slot]
  void* base() const { return memory_.data(); }

  StateCacheLayout layout_;
  std::int32_t num_groups_ = 0;
  PoolMemory memory_;  // the backend's, or a KvMemoryProvider's
  Device device_{};
};

// Which state groups are free. Not thread-safe (the engine's loop owns it).
class StateGroupPool {
 public:
  explicit StateGroupPool(std::int32_t num_groups);
  // A free group, or -1 when none is.
  std::int32_t allocate();
  void free(std::int32_t group);  // checked: a group must be held to be freed
  std::int32_t num_free() const { return static_cast<std::int32_t>(free_.size()); }
  std::int32_t num_groups() const { return static_cast<std::int32_t>(held_.size()); }

 private:
  std::vector<std::int32_t> free_;  // a stack: the most recently freed group is reused first
  std::vector<bool> held_;
};

}  // namespace baton
