// The KV layout the KV-pool unit tests share: 2 layers x [2, 4 rows, 2 heads, 8 dims] F32 per
// block, so a row is 64 bytes, the K (or V) half of a block 256 and a (layer, block) 512.
#pragma once

#include "engine/kv/kv_cache.h"

namespace baton::testing {

inline KvCacheLayout small_kv_layout() {
  KvCacheLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 8;
  l.block_size = 4;
  return l;
}

}  // namespace baton::testing
