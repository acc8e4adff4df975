// Paged attention: causal (optionally sliding-window) GQA attention of new tokens over the
// paged KV cache, one work item per (token, kv head). Scores use the canonical dot product;
// softmax uses vexp (activation_kernels.h), so include that first.
// Part of the tier kernels: included only by kernels_impl.h, inside a tier's namespace after that
// tier's simd16_*.h (never on its own; it has no include guard of its own and no includes). The
// numerical contract is in kernels_impl.h.

// ---- paged attention -----------------------------------------------------------------------------

// out[h] += p * v for one head (the running sum over keys in increasing position order).
inline void axpy_row(float p, const float* v, float* out, std::int64_t n) {
  const V16 pv = vset1(p);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) vstore(out + i, vfma(pv, vload(v + i), vload(out + i)));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    vstore_n(out + i, vfma(pv, vload_n(v + i, r), vload_n(out + i, r)), r);
  }
}

inline void attention(const baton::cpu::AttentionArgs& a, std::int64_t item_begin,
                      std::int64_t item_end, float* scratch) {
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  const std::int64_t hd = a.head_dim;
  const std::int64_t token_stride_kv = static_cast<std::int64_t>(a.num_kv_heads) * hd;
  const std::int64_t block_stride = 2 * a.block_size * token_stride_kv;
  for (std::int64_t item = item_begin; item < item_end; ++item) {
    const std::int64_t t = item / a.num_kv_heads;
    const std::int64_t kvh = item % a.num_kv_heads;
    const std::int64_t pos = a.positions[t];
    const std::int64_t first = a.sliding_window > 0 ? std::max<std::int64_t>(0, pos - a.sliding_window + 1) : 0;
    const std::int64_t n_keys = pos - first + 1;
    const std::int32_t* blocks = a.block_tables + a.token_seq[t] * a.block_table_stride;
    const float* q = a.q + t * a.q_stride + kvh * group * hd;
    float* scores = scratch;                       // [group, n_keys rounded up to 16]
    const std::int64_t score_stride = (n_keys + 15) / 16 * 16;
    float* acc = scratch + group * score_stride;   // [group, hd]

    for (std::int64_t j = 0; j < n_keys; ++j) {
      const std::int64_t p = first + j;
      const float* key = a.kv_cache + blocks[p / a.block_size] * block_stride +
                         (p % a.block_size) * token_stride_kv + kvh * hd;
      for (std::int64_t g = 0; g < group; ++g) scores[g * score_stride + j] = dot(q + g * hd, key, hd) * a.scale;
    }
    for (std::int64_t g = 0; g < group; ++g) {
      float* s = scores + g * score_stride;
      V16 mx = vset1(s[0]);
      std::int64_t j = 0;
      for (; j + 16 <= n_keys; j += 16) mx = vmax(mx, vload(s + j));
      if (j < n_keys) mx = vmax(mx, vmax(vload_n(s + j, static_cast<int>(n_keys - j)), vset1(s[0])));
      const V16 m = vset1(vreduce_max(mx));
      V16 sum = vzero();
      for (j = 0; j + 16 <= n_keys; j += 16) {
        const V16 e = vexp(vsub(vload(s + j), m));
        vstore(s + j, e);
        sum = vadd(sum, e);
      }
      if (j < n_keys) {
        const int r = static_cast<int>(n_keys - j);
        const V16 e = vexp(vsub(vload_n(s + j, r), m));
        vstore_n(s + j, e, r);
        sum = vadd(sum, vload_n(s + j, r));
      }
      const float inv_sum = 1.0f / vreduce_add(sum);
      for (j = 0; j < n_keys; ++j) s[j] *= inv_sum;
      std::fill(acc + g * hd, acc + (g + 1) * hd, 0.0f);
    }
    for (std::int64_t j = 0; j < n_keys; ++j) {
      const std::int64_t p = first + j;
      const float* value = a.kv_cache + blocks[p / a.block_size] * block_stride +
                           a.block_size * token_stride_kv + (p % a.block_size) * token_stride_kv + kvh * hd;
      for (std::int64_t g = 0; g < group; ++g) axpy_row(scores[g * score_stride + j], value, acc + g * hd, hd);
    }
    for (std::int64_t g = 0; g < group; ++g) {
      std::copy(acc + g * hd, acc + (g + 1) * hd, a.out + t * a.out_stride + (kvh * group + g) * hd);
    }
  }
}
