// Paged attention: causal (optionally sliding-window) GQA attention of new tokens over the
// paged KV cache. One work item is (block of kAttentionTokenBlock tokens, kv head); inside it,
// consecutive tokens of one sequence (a run; one token when a sliding window is set) share the
// key/value row pointers (and, on tiers without wide scores, the key loads of GEMM tiles).
// Each token's arithmetic is exactly the per-token algorithm, so its bits do not depend on the
// run or the batch it is in:
//   score[j] = canonical dot(q, key[j]) * scale  (one V16 accumulator, vreduce_add's tree; tiers
//              with kAttentionWideScores reduce 16 keys' accumulators together with
//              vreduce_add16, which adds the same pairs);
//   softmax over the token's own keys (max, vexp, 16-lane sum, tree, times 1 / sum);
//   out = sum over keys in increasing position of p[j] * value[j] (one fma per key and element,
//         from zero; the accumulators stay in registers across a block of keys and wait, exact,
//         in out between blocks).
// Several rows of one kv head (a GQA group's heads, a run's tokens) share each key's and value's
// loads: keys outside, rows inside.
// The cache holds F32 or BF16 rows (KV below: float or std::uint16_t); BF16 rows are widened to
// F32 as they are loaded (exact), so attention over a BF16 cache is this algorithm over the rounded
// keys and values, bit for bit.
// Softmax uses vexp (activation_kernels.h), so include that first.
// Part of the tier kernels: included only by kernels_impl.h, inside a tier's namespace after that
// tier's simd16_*.h (never on its own; it has no include guard of its own and no includes). The
// numerical contract is in kernels_impl.h.

// ---- paged attention -----------------------------------------------------------------------------

// 16 (or the first n) elements of a key or value row as F32.
inline V16 vload_kv(const float* p) { return vload(p); }
inline V16 vload_kv(const std::uint16_t* p) { return vload_bf16(p); }
inline V16 vload_kv_n(const float* p, int n) { return vload_n(p, n); }
inline V16 vload_kv_n(const std::uint16_t* p, int n) { return vload_bf16_n(p, n); }
// The GEMM tile's weight type for a key row type.
template <class KV>
inline constexpr baton::DType kKvRowDType = std::is_same_v<KV, float> ? baton::DType::kF32 : baton::DType::kBF16;

// s[0, n) *= f (one rounding per element, as a scalar loop would).
inline void scale_row(float* s, std::int64_t n, float f) {
  const V16 fv = vset1(f);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) vstore(s + j, vmul(vload(s + j), fv));
  if (j < n) vstore_n(s + j, vmul(vload_n(s + j, static_cast<int>(n - j)), fv), static_cast<int>(n - j));
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
  scale_row(s, n, 1.0f / vreduce_add(sum));
}

// Scores of one query row against keys key[0, n) (n <= 16; the rest of key[] may repeat any key):
// s[j] = canonical dot(q, key[j]) * scale for j < n, the 16 dots reduced together (vreduce_add16).
template <class KV>
inline void scores16(const float* q, const KV* const* key, std::int64_t hd, float scale, float* s, int n) {
  V16 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = vzero();
  std::int64_t c = 0;
  for (; c + 16 <= hd; c += 16) {
    const V16 qv = vload(q + c);
    for (int j = 0; j < 16; ++j) acc[j] = vfma(qv, vload_kv(key[j] + c), acc[j]);
  }
  if (c < hd) {
    const int r = static_cast<int>(hd - c);
    const V16 qv = vload_n(q + c, r);
    for (int j = 0; j < 16; ++j) acc[j] = vfma(qv, vload_kv_n(key[j] + c, r), acc[j]);
  }
  const V16 out = vmul(vreduce_add16(acc), vset1(scale));
  if (n == 16) {
    vstore(s, out);
  } else {
    vstore_n(s, out, n);
  }
}

// out[c0, c0 + 16 R) = sum over keys j < n, in increasing j, of p[j] * value[j][...] (one fma per
// key and element, from zero), the R accumulators in registers across all keys. R is a template
// argument so that they really are registers (an array indexed at run time would live in memory
// and make every key wait for the previous key's store).
template <int R, class KV>
inline void weighted_values_regs(const float* p, const KV* const* value, std::int64_t j0, std::int64_t j1,
                                 std::int64_t c0, float* out) {
  V16 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = j0 > 0 ? vload(out + c0 + 16 * i) : vzero();
  for (std::int64_t j = j0; j < j1; ++j) {
    const V16 pj = vset1(p[j]);
    const KV* v = value[j] + c0;
    for (int i = 0; i < R; ++i) acc[i] = vfma(pj, vload_kv(v + 16 * i), acc[i]);
  }
  for (int i = 0; i < R; ++i) vstore(out + c0 + 16 * i, acc[i]);
}

template <int RMax, class KV>
inline void weighted_values_dyn(int regs, const float* p, const KV* const* value, std::int64_t j0, std::int64_t j1,
                                std::int64_t c0, float* out) {
  if constexpr (RMax > 0) {
    if (regs < RMax) {
      weighted_values_dyn<RMax - 1>(regs, p, value, j0, j1, c0, out);
    } else {
      weighted_values_regs<RMax>(p, value, j0, j1, c0, out);
    }
  }
}

// The same for the last `width` (< 16) elements from c0.
template <class KV>
inline void weighted_values_tail(const float* p, const KV* const* value, std::int64_t j0, std::int64_t j1,
                                 std::int64_t c0, int width, float* out) {
  V16 acc = j0 > 0 ? vload_n(out + c0, width) : vzero();
  for (std::int64_t j = j0; j < j1; ++j) acc = vfma(vset1(p[j]), vload_kv_n(value[j] + c0, width), acc);
  vstore_n(out + c0, acc, width);
}

// out[0, hd) = sum over keys j of p[j] * value[j], for the keys [j0, j1) of a block, in chunks of
// kAttentionValueRegs V16. With j0 > 0 the sums resume from what out holds (the earlier blocks'
// exact partial sums), so splitting the keys into blocks changes no bit.
template <class KV>
inline void weighted_values(const float* p, const KV* const* value, std::int64_t j0, std::int64_t j1,
                            std::int64_t hd, float* out) {
  std::int64_t c0 = 0;
  for (; c0 + 16 <= hd;) {
    const int regs = static_cast<int>(std::min<std::int64_t>(kAttentionValueRegs, (hd - c0) / 16));
    weighted_values_dyn<kAttentionValueRegs>(regs, p, value, j0, j1, c0, out);
    c0 += 16 * regs;
  }
  if (c0 < hd) weighted_values_tail(p, value, j0, j1, c0, static_cast<int>(hd - c0), out);
}

// kRows rows at once (query heads of a group, or tokens, of one kv head): for each, exactly the
// sums weighted_values makes (per accumulator, keys in increasing order, resumed from out after
// the first block), with the value loads shared and kRows times the independent fma chains in
// flight (each chain waits for its previous fma; one row of head_dim 64 has only 4 of them, far
// fewer than keep the FMA units busy). Row r has n[r] keys; keys [j0, j1) are summed.
template <int kRows, int R, class KV>
inline void weighted_values_rows_regs(const float* const* p, const std::int64_t* n, float* const* out,
                                      const KV* const* value, std::int64_t j0, std::int64_t j1, std::int64_t c0) {
  V16 acc[kRows][R];
  std::int64_t end[kRows];
  std::int64_t common = j1;
  for (int r = 0; r < kRows; ++r) {
    for (int i = 0; i < R; ++i) acc[r][i] = j0 > 0 ? vload(out[r] + c0 + 16 * i) : vzero();
    end[r] = std::min(n[r], j1);
    common = std::min(common, end[r]);
  }
  std::int64_t j = j0;
  for (; j < common; ++j) {
    V16 w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = vset1(p[r][j]);
    const KV* v = value[j] + c0;
    for (int i = 0; i < R; ++i) {
      const V16 x = vload_kv(v + 16 * i);
      for (int r = 0; r < kRows; ++r) acc[r][i] = vfma(w[r], x, acc[r][i]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (std::int64_t k = std::max(j, j0); k < end[r]; ++k) {
      const V16 w = vset1(p[r][k]);
      for (int i = 0; i < R; ++i) acc[r][i] = vfma(w, vload_kv(value[k] + c0 + 16 * i), acc[r][i]);
    }
    for (int i = 0; i < R; ++i) vstore(out[r] + c0 + 16 * i, acc[r][i]);
  }
}

template <int kRows, int RMax, class KV>
inline void weighted_values_rows_dyn(int regs, const float* const* p, const std::int64_t* n, float* const* out,
                                     const KV* const* value, std::int64_t j0, std::int64_t j1, std::int64_t c0) {
  if constexpr (RMax > 0) {
    if (regs < RMax) {
      weighted_values_rows_dyn<kRows, RMax - 1>(regs, p, n, out, value, j0, j1, c0);
    } else {
      weighted_values_rows_regs<kRows, RMax>(p, n, out, value, j0, j1, c0);
    }
  }
}

// weighted_values over keys [j0, j1) for kRows rows, kAttentionRowValueRegs V16 per row at a
// time; a row with no keys in the range keeps its sums.
template <int kRows, class KV>
inline void weighted_values_rows(const float* const* p, const std::int64_t* n, float* const* out,
                                 const KV* const* value, std::int64_t j0, std::int64_t j1, std::int64_t hd) {
  std::int64_t c0 = 0;
  for (; c0 + 16 <= hd;) {
    const int regs = static_cast<int>(std::min<std::int64_t>(kAttentionRowValueRegs, (hd - c0) / 16));
    weighted_values_rows_dyn<kRows, kAttentionRowValueRegs>(regs, p, n, out, value, j0, j1, c0);
    c0 += 16 * regs;
  }
  if (c0 < hd) {
    for (int r = 0; r < kRows; ++r) {
      weighted_values_tail(p[r], value, j0, std::min(n[r], j1), c0, static_cast<int>(hd - c0), out[r]);
    }
  }
}

// The first `count` (<= kRows) rows of p, n and out, the rows a full pass leaves, in one pass.
template <int kRows, class KV>
inline void weighted_values_leftover(const float* const* p, const std::int64_t* n, float* const* out, int count,
                                     const KV* const* value, std::int64_t j0, std::int64_t j1, std::int64_t hd) {
  if constexpr (kRows > 1) {
    if (count == kRows) {
      weighted_values_rows<kRows>(p, n, out, value, j0, j1, hd);
    } else {
      weighted_values_leftover<kRows - 1>(p, n, out, count, value, j0, j1, hd);
    }
  } else if (count == 1) {
    weighted_values(p[0], value, j0, std::min(n[0], j1), hd, out[0]);
  }
}

// A decode step's KV is cold (the weights have streamed through the caches since it was last
// read) and scattered a token row apart, which the hardware prefetchers do not follow: attention
// asks for the key and value rows of the first kPrefetchKeys positions (32 KiB at head_dim 64)
// when it makes their pointers. Not more: a long context's rows would evict each other before
// their turn. Measured on 8 cold decode rows, 12 heads: 17% less time over 40 keys, 3-6% over
// 300, 2% over 1500; prefetching every key, or streaming ahead of the scores, was 7-30% slower
// than none over 1500 keys.
inline constexpr std::int64_t kPrefetchKeys = 64;
template <class KV>
inline void prefetch_row(const KV* key, const KV* value, std::int64_t hd) {
  for (std::int64_t c = 0; c < hd; c += 64 / static_cast<std::int64_t>(sizeof(KV))) {
    __builtin_prefetch(key + c);
    __builtin_prefetch(value + c);
  }
}

// Tokens [t0, t1) of one sequence for one kv head, all attending from key position `first`
// (t1 - t0 == 1 unless first == 0 for all of them). Each token's arithmetic is the per-token
// algorithm of the header comment whatever the run: the run only shares the key pointers and,
// on tiers without wide scores, the key loads of the score tiles.
template <class KV>
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
  float* scores = scratch;  // [runs, group, score_stride]
  // Key and value row pointers of positions first .. last - 1 (keys: score_stride of them, the
  // tail repeating the first), created in the scratch after the scores (placement new starts
  // their lifetime there).
  auto* keys = static_cast<const KV**>(static_cast<void*>(scratch + runs * group * score_stride));
  const KV** values = keys + score_stride;
  auto score_row = [&](std::int64_t r, std::int64_t g) { return scores + (r * group + g) * score_stride; };
  auto n_keys = [&](std::int64_t r) { return a.positions[t0 + r] + 1 - first; };
  std::int64_t made = 0;
  for (std::int64_t p0 = first; p0 < last;) {  // block by block: one division per block
    const std::int64_t in_block = p0 % bs;
    const std::int64_t nk = std::min(bs - in_block, last - p0);
    const KV* key =
        static_cast<const KV*>(a.kv_cache) + blocks[p0 / bs] * block_stride + in_block * token_stride_kv + kvh * hd;
    for (std::int64_t i = 0; i < nk; ++i, ++made, key += token_stride_kv) {
      ::new (static_cast<void*>(keys + made)) const KV*(key);
      ::new (static_cast<void*>(values + made)) const KV*(key + bs * token_stride_kv);
      if (made < kPrefetchKeys) prefetch_row(key, key + bs * token_stride_kv, hd);
    }
    p0 += nk;
  }
  for (; made < score_stride; ++made) {
    ::new (static_cast<void*>(keys + made)) const KV*(keys[0]);
    ::new (static_cast<void*>(values + made)) const KV*(values[0]);
  }

  if constexpr (kAttentionWideScores) {
    // Keys outside, query rows inside: each 16 keys' rows are read from L2 once and stay in L1
    // while every row of the run and the group scores them.
    for (std::int64_t j = 0; j < n_max; j += 16) {
      for (std::int64_t r = 0; r < runs; ++r) {
        const std::int64_t n = n_keys(r);
        if (j >= n) continue;
        for (std::int64_t g = 0; g < group; ++g) {
          const float* q = a.q + (t0 + r) * a.q_stride + (kvh * group + g) * hd;
          scores16(q, keys + j, hd, a.scale, score_row(r, g) + j, static_cast<int>(std::min<std::int64_t>(16, n - j)));
        }
      }
    }
  } else {
    // Per KV block, tiles of (run tokens) x (keys) for each query head of the group.
    for (std::int64_t p0 = first; p0 < last;) {
      const std::int64_t in_block = p0 % bs;
      const std::int64_t nk = std::min(bs - in_block, last - p0);
      const KV* block_keys = keys[p0 - first];
      for (std::int64_t g = 0; g < group; ++g) {
        const float* q = a.q + t0 * a.q_stride + (kvh * group + g) * hd;
        float* y = score_row(0, g) + (p0 - first);
        for (std::int64_t r = 0; r < runs; r += kGemmMaxRows) {
          const int mr = static_cast<int>(std::min<std::int64_t>(kGemmMaxRows, runs - r));
          for (std::int64_t j = 0; j < nk; j += kGemmMaxCols) {
            const int nr = static_cast<int>(std::min<std::int64_t>(kGemmMaxCols, nk - j));
            gemm_tile_dyn<kKvRowDType<KV>, kGemmMaxRows, kGemmMaxCols>(
                q + r * a.q_stride, a.q_stride, block_keys + j * token_stride_kv, token_stride_kv, nullptr,
                y + r * group * score_stride + j, group * score_stride, hd, mr, nr);
          }
        }
      }
      p0 += nk;
    }
    for (std::int64_t r = 0; r < runs; ++r) {
      for (std::int64_t g = 0; g < group; ++g) scale_row(score_row(r, g), n_keys(r), a.scale);
    }
  }
  // Rows q = r * group + g: softmax each, then the value sums kAttentionValueRows rows at a time.
  const std::int64_t rows = runs * group;
  auto out_row = [&](std::int64_t q) { return a.out + (t0 + q / group) * a.out_stride + (kvh * group + q % group) * hd; };
  for (std::int64_t q = 0; q < rows; ++q) softmax_row(score_row(q / group, q % group), n_keys(q / group));
  // Blocks of keys outside, rows inside: a block's value rows (about 16 KiB) stay in L1 while every
  // pass of rows goes over them, the sums waiting in out between blocks.
  const std::int64_t key_block = std::max<std::int64_t>(16, 4096 / hd);
  constexpr int kRows = kAttentionValueRows;
  for (std::int64_t j0 = 0; j0 < n_max; j0 += key_block) {
    const std::int64_t j1 = std::min(n_max, j0 + key_block);
    // Passes of kRows rows as without blocks; a pass whose rows have no keys from j0 on is done.
    for (std::int64_t q = 0; q < rows; q += kRows) {
      const int count = static_cast<int>(std::min<std::int64_t>(kRows, rows - q));
      const float* p[kRows];
      std::int64_t n[kRows];
      float* out[kRows];
      std::int64_t most = 0;
      for (int r = 0; r < count; ++r) {
        p[r] = score_row((q + r) / group, (q + r) % group);
        n[r] = n_keys((q + r) / group);
        out[r] = out_row(q + r);
        most = std::max(most, n[r]);
      }
      if (most <= j0) continue;
      if (count == kRows) {
        weighted_values_rows<kRows>(p, n, out, values, j0, j1, hd);
      } else {
        weighted_values_leftover<kRows - 1>(p, n, out, count, values, j0, j1, hd);
      }
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
      for (std::int64_t kvh = h0; kvh < h1; ++kvh) {
        if (a.kv_dtype == baton::DType::kBF16) {
          attention_run<std::uint16_t>(a, t, u, kvh, first, scratch);
        } else {
          attention_run<float>(a, t, u, kvh, first, scratch);
        }
      }
      t = u;
    }
  }
}
