// Paged attention: causal (optionally sliding-window) GQA attention of new tokens over the
// paged KV cache. One work item is (block of kAttentionTokenBlock tokens, kv head); inside it,
// consecutive tokens of one sequence (a run; one token when a sliding window is set) share every
// key and value load: scores are GEMM tiles of the run's queries by a KV block's keys, values are
// added to every token of the run that sees them. Each token's arithmetic is still exactly the
// per-token algorithm: score = canonical dot (gemm_tile's per-element order) * scale, softmax over
// its own keys, then p * v summed in increasing key order, so a token's bits do not depend on the
// run or the batch it is in. Softmax uses vexp (activation_kernels.h), so include that first.
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

// Softmax in place over one token's scores s[0, n) (max, exp, 16-lane sum, scale by 1 / sum).
inline void softmax_row(float* s, std::int64_t n) {
  V16 mx = vset1(s[0]);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) mx = vmax(mx, vload(s + j));
  if (j < n) mx = vmax(mx, vmax(vload_n(s + j, static_cast<int>(n - j)), vset1(s[0])));
  const V16 m = vset1(vreduce_max(mx));
  V16 sum = vzero();
  for (j = 0; j + 16 <= n; j += 16) {
    const V16 e = vexp(vsub(vload(s + j), m));
    vstore(s + j, e);
    sum = vadd(sum, e);
  }
  if (j < n) {
    const int r = static_cast<int>(n - j);
    const V16 e = vexp(vsub(vload_n(s + j, r), m));
    vstore_n(s + j, e, r);
    sum = vadd(sum, vload_n(s + j, r));
  }
  const float inv_sum = 1.0f / vreduce_add(sum);
  for (j = 0; j < n; ++j) s[j] *= inv_sum;
}

// Tokens [t0, t1) of one sequence for one kv head, all attending from key position `first`
// (t1 - t0 == 1 unless first == 0 for all of them).
inline void attention_run(const baton::cpu::AttentionArgs& a, std::int64_t t0, std::int64_t t1, std::int64_t kvh,
                          std::int64_t first, float* scratch) {
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  const std::int64_t hd = a.head_dim;
  const std::int64_t bs = a.block_size;
  const std::int64_t token_stride_kv = static_cast<std::int64_t>(a.num_kv_heads) * hd;
  const std::int64_t block_stride = 2 * bs * token_stride_kv;
  const std::int64_t runs = t1 - t0;
  const std::int32_t* blocks = a.block_tables + a.token_seq[t0] * a.block_table_stride;
  std::int64_t last = 0;  // one past the last key position any token of the run sees
  for (std::int64_t t = t0; t < t1; ++t) last = std::max<std::int64_t>(last, a.positions[t] + 1);
  const std::int64_t n_max = last - first;
  const std::int64_t score_stride = (n_max + 15) / 16 * 16;
  float* scores = scratch;                                // [runs, group, score_stride]
  float* acc = scratch + runs * group * score_stride;     // [runs, group, hd]
  auto score_row = [&](std::int64_t r, std::int64_t g) { return scores + (r * group + g) * score_stride; };
  auto n_keys = [&](std::int64_t r) { return a.positions[t0 + r] + 1 - first; };

  // Scores: per KV block, tiles of (run tokens) x (keys) for each query head of the group.
  for (std::int64_t p0 = first; p0 < last;) {
    const std::int64_t in_block = p0 % bs;
    const std::int64_t nk = std::min(bs - in_block, last - p0);
    const float* keys = a.kv_cache + blocks[p0 / bs] * block_stride + in_block * token_stride_kv + kvh * hd;
    for (std::int64_t g = 0; g < group; ++g) {
      const float* q = a.q + t0 * a.q_stride + (kvh * group + g) * hd;
      float* y = score_row(0, g) + (p0 - first);
      for (std::int64_t r = 0; r < runs; r += kGemmMaxRows) {
        const int mr = static_cast<int>(std::min<std::int64_t>(kGemmMaxRows, runs - r));
        for (std::int64_t j = 0; j < nk; j += kGemmMaxCols) {
          const int nr = static_cast<int>(std::min<std::int64_t>(kGemmMaxCols, nk - j));
          gemm_tile_dyn<baton::DType::kF32, kGemmMaxRows, kGemmMaxCols>(
              q + r * a.q_stride, a.q_stride, keys + j * token_stride_kv, token_stride_kv, nullptr,
              y + r * group * score_stride + j, group * score_stride, hd, mr, nr);
        }
      }
    }
    p0 += nk;
  }
  for (std::int64_t r = 0; r < runs; ++r) {
    for (std::int64_t g = 0; g < group; ++g) {
      float* s = score_row(r, g);
      const std::int64_t n = n_keys(r);
      for (std::int64_t j = 0; j < n; ++j) s[j] *= a.scale;
      softmax_row(s, n);
      std::fill(acc + (r * group + g) * hd, acc + (r * group + g + 1) * hd, 0.0f);
    }
  }
  // Values: each value row once, added to every token that sees it, in increasing key order.
  for (std::int64_t j = 0; j < n_max; ++j) {
    const std::int64_t p = first + j;
    const float* value = a.kv_cache + blocks[p / bs] * block_stride + bs * token_stride_kv +
                         (p % bs) * token_stride_kv + kvh * hd;
    for (std::int64_t r = 0; r < runs; ++r) {
      if (j >= n_keys(r)) continue;
      for (std::int64_t g = 0; g < group; ++g) axpy_row(score_row(r, g)[j], value, acc + (r * group + g) * hd, hd);
    }
  }
  for (std::int64_t r = 0; r < runs; ++r) {
    for (std::int64_t g = 0; g < group; ++g) {
      std::copy(acc + (r * group + g) * hd, acc + (r * group + g + 1) * hd,
                a.out + (t0 + r) * a.out_stride + (kvh * group + g) * hd);
    }
  }
}

inline void attention(const baton::cpu::AttentionArgs& a, std::int64_t item_begin, std::int64_t item_end,
                      float* scratch) {
  constexpr std::int64_t kBlock = baton::cpu::kAttentionTokenBlock;
  const std::int64_t kv_heads = a.num_kv_heads;
  for (std::int64_t item = item_begin; item < item_end;) {
    // The items of one token block in [item_begin, item_end): kv heads [h0, h1).
    const std::int64_t tb = item / kv_heads;
    const std::int64_t h0 = item % kv_heads;
    const std::int64_t h1 = std::min(kv_heads, item_end - tb * kv_heads);
    item = tb * kv_heads + h1;
    const std::int64_t end = std::min(a.num_tokens, (tb + 1) * kBlock);
    // Runs outside, kv heads inside: a decode batch (runs of one token) reads each sequence's KV
    // positions for all its heads together, as the cache lays them out.
    for (std::int64_t t = tb * kBlock; t < end;) {
      std::int64_t u = t + 1;
      std::int64_t first = 0;
      if (a.sliding_window > 0) {
        first = std::max<std::int64_t>(0, a.positions[t] - a.sliding_window + 1);
      } else {
        while (u < end && a.token_seq[u] == a.token_seq[t]) ++u;
      }
      for (std::int64_t kvh = h0; kvh < h1; ++kvh) attention_run(a, t, u, kvh, first, scratch);
      t = u;
    }
  }
}
