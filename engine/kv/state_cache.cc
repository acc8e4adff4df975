#include "engine/kv/state_cache.h"

#include "common/status.h"

namespace baton {

std::string StateCacheLayout::describe() const {
  return str_cat(num_layers, " recurrent layers x [groups, ", slots, " slots, ", conv_floats, " conv + ",
                 recurrent_floats, " state floats] F32");
}

absl::StatusOr<StateCache> StateCache::create(Backend& backend, const StateCacheLayout& layout,
                                              std::int32_t num_groups, KvMemoryProvider* provider,
                                              std::string_view pool_name) {
  if (num_groups < 1 || layout.num_layers < 1 || layout.slots < 1 || layout.floats_per_slot() < 1) {
    return absl::ResourceExhaustedError(str_cat("recurrent state cache: ", num_groups, " groups of ",
                                                layout.bytes_per_group(), " bytes (", layout.describe(),
                                                "); every running request needs one"));
  }
  StateCache cache;
  cache.layout_ = layout;
  cache.num_groups_ = num_groups;
  cache.device_ = backend.device();
  BATON_ASSIGN_OR_RETURN(cache.memory_,
                         PoolMemory::allocate(backend, static_cast<std::size_t>(layout.bytes_per_group() * num_groups),
                                              provider, pool_name, "recurrent state cache"));
  return cache;
}

TensorView StateCache::layer_view(std::int32_t layer) const {
  BATON_CHECK(layer >= 0 && layer < layout_.num_layers, "recurrent layer ", layer, " of ", layout_.num_layers);
  const std::int64_t per_layer = static_cast<std::int64_t>(num_groups_) * layout_.slots * layout_.floats_per_slot();
  return TensorView::contiguous(static_cast<float*>(base()) + layer * per_layer, DType::kF32,
                                {num_groups_, layout_.slots, layout_.floats_per_slot()}, device_);
}

TensorView StateCache::conv(std::int32_t layer) const { return layer_view(layer).slice_last(0, layout_.conv_floats); }

TensorView StateCache::recurrent(std::int32_t layer) const {
  return layer_view(layer).slice_last(layout_.conv_floats, layout_.floats_per_slot());
}

TensorView StateCache::slot(std::int32_t layer, std::int32_t group, std::int32_t s) const {
  BATON_CHECK(group >= 0 && group < num_groups_ && s >= 0 && s < layout_.slots, "state group ", group, " slot ", s,
              " of ", num_groups_, " x ", layout_.slots);
  const TensorView v = layer_view(layer);
  return TensorView::contiguous(v.ptr<float>() + group * v.stride(0) + s * v.stride(1), DType::kF32,
                                {layout_.floats_per_slot()}, device_);
}

KvRegion StateCache::region() const { return KvRegion{memory_.data(), memory_.bytes(), device_}; }

PoolGeometry StateCache::geometry() const {
  return PoolGeometry{layout_.num_layers, num_groups_ * layout_.slots,
                      static_cast<std::uint64_t>(layout_.floats_per_slot()) * sizeof(float)};
}

KvSpan StateCache::span(std::int32_t layer, std::int32_t group, std::int32_t s) const {
  const TensorView v = slot(layer, group, s);
  return KvSpan{static_cast<std::size_t>(static_cast<char*>(v.data) - static_cast<char*>(base())),
                static_cast<std::size_t>(v.numel()) * sizeof(float)};
}

void StateCache::copy_slot(Backend& backend, std::int32_t group, std::int32_t from, std::int32_t to) const {
  if (from == to) return;
  const auto bytes = static_cast<std::size_t>(layout_.floats_per_slot()) * sizeof(float);
  for (std::int32_t l = 0; l < layout_.num_layers; ++l) {
    backend.copy_on_device(slot(l, group, to).data, slot(l, group, from).data, bytes);
  }
}

StateGroupPool::StateGroupPool(std::int32_t num_groups) : held_(static_cast<std::size_t>(num_groups), false) {
  for (std::int32_t g = num_groups - 1; g >= 0; --g) free_.push_back(g);
}

std::int32_t StateGroupPool::allocate() {
  if (free_.empty()) return -1;
  const std::int32_t g = free_.back();
  free_.pop_back();
  held_[static_cast<std::size_t>(g)] = true;
  return g;
}

void StateGroupPool::free(std::int32_t group) {
  BATON_CHECK(group >= 0 && group < num_groups() && held_[static_cast<std::size_t>(group)], "state group ", group,
              " freed but not held");
  held_[static_cast<std::size_t>(group)] = false;
  free_.push_back(group);
}

}  // namespace baton
