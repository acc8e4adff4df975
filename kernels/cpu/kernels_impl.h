// The CPU kernels, written once over V16 and compiled per ISA tier.
//
// Include this file inside a tier's own namespace, after that tier's simd16_*.h; it must not be
// included anywhere else (each tier's copy is compiled with different instruction-set flags, and
// the per-tier namespace keeps the linker from merging them).
//
// Numerical contract (what makes rows batch-invariant and tiers bit-identical): every reduction
// of a row uses 16 lanes, lane l accumulating the elements l, l+16, l+32, ... with fused
// multiply-adds in increasing index order, a zero-filled partial chunk at the end, then
// vreduce_add's fixed tree. GEMMs over BF16 weights use "pair order" instead, which SIMD tiers
// widen more cheaply: per 32 elements, lane l takes element 2l then element 2l+1. Nothing depends
// on how many rows share a call or on the thread count.

// ---- loads by weight dtype ---------------------------------------------------------------------

template <baton::DType W>
struct WeightLoad;
template <>
struct WeightLoad<baton::DType::kF32> {
  using T = float;
  static V16 full(const T* p) { return vload(p); }
  static V16 part(const T* p, int n) { return vload_n(p, n); }
};
template <>
struct WeightLoad<baton::DType::kBF16> {
  using T = std::uint16_t;
  static V16 full(const T* p) { return vload_bf16(p); }
  static V16 part(const T* p, int n) { return vload_bf16_n(p, n); }
};
template <>
struct WeightLoad<baton::DType::kF16> {
  using T = std::uint16_t;
  static V16 full(const T* p) { return vload_f16(p); }
  static V16 part(const T* p, int n) { return vload_f16_n(p, n); }
};

// ---- GEMM: dot-product tiles of MR rows of x by NR rows of w -----------------------------------

template <baton::DType W, int MR, int NR>
void gemm_tile(const float* x, std::int64_t ldx, const typename WeightLoad<W>::T* w, std::int64_t ldw,
               const float* bias, float* y, std::int64_t ldy, std::int64_t k) {
  V16 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = vzero();
  std::int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    V16 wv[NR];
    for (int j = 0; j < NR; ++j) {
      // The next panel of weight rows starts NR rows below: fetch it while this one computes
      // (decode reads each weight once, so hiding memory latency is the whole game).
      __builtin_prefetch(w + (j + NR) * ldw + kk);
      wv[j] = WeightLoad<W>::full(w + j * ldw + kk);
    }
    for (int i = 0; i < MR; ++i) {
      const V16 xv = vload(x + i * ldx + kk);
      for (int j = 0; j < NR; ++j) acc[i][j] = vfma(xv, wv[j], acc[i][j]);
    }
  }
  if (kk < k) {
    const int n = static_cast<int>(k - kk);
    V16 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = WeightLoad<W>::part(w + j * ldw + kk, n);
    for (int i = 0; i < MR; ++i) {
      const V16 xv = vload_n(x + i * ldx + kk, n);
      for (int j = 0; j < NR; ++j) acc[i][j] = vfma(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float s = vreduce_add(acc[i][j]);
      y[i * ldy + j] = bias != nullptr ? s + bias[j] : s;
    }
  }
}

// A tile whose shape (mr <= MRMax, nr <= NRMax) is only known at run time.
template <baton::DType W, int MRMax, int NRMax>
void gemm_tile_dyn(const float* x, std::int64_t ldx, const typename WeightLoad<W>::T* w,
                   std::int64_t ldw, const float* bias, float* y, std::int64_t ldy, std::int64_t k,
                   int mr, int nr) {
  if constexpr (MRMax > 0 && NRMax > 0) {
    if (mr < MRMax) {
      gemm_tile_dyn<W, MRMax - 1, NRMax>(x, ldx, w, ldw, bias, y, ldy, k, mr, nr);
    } else if (nr < NRMax) {
      gemm_tile_dyn<W, MRMax, NRMax - 1>(x, ldx, w, ldw, bias, y, ldy, k, mr, nr);
    } else {
      gemm_tile<W, MRMax, NRMax>(x, ldx, w, ldw, bias, y, ldy, k);
    }
  }
}

// Output columns [n_begin, n_end) for every row: column panels outside, row tiles inside, so a
// panel of NR weight rows stays in L1 while all rows of x pass over it. tile(x, w, bias, y, mr, nr)
// computes one mr x nr tile; x may be a packed copy with its own row stride ldx.
template <class XT, class WT, class TileFn>
void over_tiles(const baton::cpu::GemmArgs& a, std::int64_t n_begin, std::int64_t n_end, const XT* x,
                std::int64_t ldx, const WT* w, TileFn tile) {
  for (std::int64_t n = n_begin; n < n_end; n += kGemmMaxCols) {
    const int nr = static_cast<int>(std::min<std::int64_t>(kGemmMaxCols, n_end - n));
    const float* bias = a.bias != nullptr ? a.bias + n : nullptr;
    for (std::int64_t m = 0; m < a.rows; m += kGemmMaxRows) {
      const int mr = static_cast<int>(std::min<std::int64_t>(kGemmMaxRows, a.rows - m));
      tile(x + m * ldx, w + n * a.ldw, bias, a.y + m * a.ldy + n, mr, nr);
    }
  }
}

template <baton::DType W>
void gemm_typed(const baton::cpu::GemmArgs& a, std::int64_t n_begin, std::int64_t n_end) {
  using T = typename WeightLoad<W>::T;
  over_tiles(a, n_begin, n_end, a.x, a.ldx, static_cast<const T*>(a.w),
             [&](const float* x, const T* w, const float* bias, float* y, int mr, int nr) {
               gemm_tile_dyn<W, kGemmMaxRows, kGemmMaxCols>(x, a.ldx, w, a.ldw, bias, y, a.ldy, a.k, mr, nr);
             });
}

// ---- BF16 weights in pair order ----------------------------------------------------------------

// x split per 32 elements into its 16 even then 16 odd elements, zero-padded to a multiple of 32.
inline void pack_pairs(const float* x, std::int64_t k, float* out) {
  const std::int64_t padded = (k + 31) / 32 * 32;
  for (std::int64_t i = 0; i < padded; ++i) {
    const std::int64_t s = i / 32, r = i % 32;
    out[s * 32 + (r % 2) * 16 + r / 2] = i < k ? x[i] : 0.0f;
  }
}

template <int MR, int NR>
void gemm_tile_bf16(const float* xp, std::int64_t ldxp, const std::uint16_t* w, std::int64_t ldw, const float* bias,
                    float* y, std::int64_t ldy, std::int64_t k) {
  V16 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = vzero();
  std::int64_t kk = 0;
  for (; kk < k; kk += 32) {
    V16 we[NR], wo[NR];
    const int n = static_cast<int>(std::min<std::int64_t>(32, k - kk));
    for (int j = 0; j < NR; ++j) {
      __builtin_prefetch(w + (j + NR) * ldw + kk);  // the next panel, as in gemm_tile
      if (n == 32) {
        vload_bf16_pairs(w + j * ldw + kk, we[j], wo[j]);
      } else {
        vload_bf16_pairs_n(w + j * ldw + kk, n, we[j], wo[j]);
      }
    }
    for (int i = 0; i < MR; ++i) {
      const V16 xe = vload(xp + i * ldxp + kk);
      const V16 xo = vload(xp + i * ldxp + kk + 16);
      for (int j = 0; j < NR; ++j) acc[i][j] = vfma(xo, wo[j], vfma(xe, we[j], acc[i][j]));
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float s = vreduce_add(acc[i][j]);
      y[i * ldy + j] = bias != nullptr ? s + bias[j] : s;
    }
  }
}

template <int MRMax, int NRMax>
void gemm_tile_bf16_dyn(const float* xp, std::int64_t ldxp, const std::uint16_t* w, std::int64_t ldw,
                        const float* bias, float* y, std::int64_t ldy, std::int64_t k, int mr, int nr) {
  if constexpr (MRMax > 0 && NRMax > 0) {
    if (mr < MRMax) {
      gemm_tile_bf16_dyn<MRMax - 1, NRMax>(xp, ldxp, w, ldw, bias, y, ldy, k, mr, nr);
    } else if (nr < NRMax) {
      gemm_tile_bf16_dyn<MRMax, NRMax - 1>(xp, ldxp, w, ldw, bias, y, ldy, k, mr, nr);
    } else {
      gemm_tile_bf16<MRMax, NRMax>(xp, ldxp, w, ldw, bias, y, ldy, k);
    }
  }
}

inline void gemm_bf16(const baton::cpu::GemmArgs& a, std::int64_t n_begin, std::int64_t n_end) {
  // Each thread packs its own copy of x: O(rows * k), small next to the O(rows * k * n) GEMM.
  thread_local std::vector<float> packed;
  const std::int64_t ldxp = (a.k + 31) / 32 * 32;
  if (static_cast<std::int64_t>(packed.size()) < a.rows * ldxp) packed.resize(static_cast<std::size_t>(a.rows * ldxp));
  for (std::int64_t m = 0; m < a.rows; ++m) pack_pairs(a.x + m * a.ldx, a.k, packed.data() + m * ldxp);
  over_tiles(a, n_begin, n_end, packed.data(), ldxp, static_cast<const std::uint16_t*>(a.w),
             [&](const float* x, const std::uint16_t* w, const float* bias, float* y, int mr, int nr) {
               gemm_tile_bf16_dyn<kGemmMaxRows, kGemmMaxCols>(x, ldxp, w, a.ldw, bias, y, a.ldy, a.k, mr, nr);
             });
}

inline void gemm(const baton::cpu::GemmArgs& a, std::int64_t n_begin, std::int64_t n_end) {
  switch (a.w_dtype) {
    case baton::DType::kF32: gemm_typed<baton::DType::kF32>(a, n_begin, n_end); break;
    case baton::DType::kBF16: gemm_bf16(a, n_begin, n_end); break;
    case baton::DType::kF16: gemm_typed<baton::DType::kF16>(a, n_begin, n_end); break;
    default: break;  // the backend validates dtypes before calling
  }
}

inline float dot(const float* a, const float* b, std::int64_t n) {
  float out;
  gemm_tile<baton::DType::kF32, 1, 1>(a, 0, b, 0, nullptr, &out, 0, n);
  return out;
}

// ---- exp, softmax pieces, norms, activations ----------------------------------------------------

// exp(x) by range reduction x = n ln2 + r (ln2 split in two for exactness) and a degree-6
// polynomial for e^r on |r| <= ln2/2 (Cephes' expf coefficients); about 1 ulp on [-87, 88].
inline V16 vexp(V16 x) {
  x = vmin(vmax(x, vset1(-87.33654f)), vset1(88.72283f));
  const V16 n = vround(vmul(x, vset1(1.44269504088896341f)));
  V16 r = vfma(n, vset1(-0.693359375f), x);
  r = vfma(n, vset1(2.12194440e-4f), r);
  V16 p = vset1(1.9875691500e-4f);
  p = vfma(p, r, vset1(1.3981999507e-3f));
  p = vfma(p, r, vset1(8.3334519073e-3f));
  p = vfma(p, r, vset1(4.1665795894e-2f));
  p = vfma(p, r, vset1(1.6666665459e-1f));
  p = vfma(p, r, vset1(5.0000001201e-1f));
  p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
  return vmul(p, vpow2i(n));
}

inline void exp_inplace(float* x, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) vstore(x + i, vexp(vload(x + i)));
  if (i < n) vstore_n(x + i, vexp(vload_n(x + i, static_cast<int>(n - i))), static_cast<int>(n - i));
}

inline void rms_norm_row(const float* x, const float* w, float eps, float* out, std::int64_t dim) {
  const float sum_sq = dot(x, x, dim);
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
  const V16 s = vset1(inv);
  std::int64_t i = 0;
  for (; i + 16 <= dim; i += 16) vstore(out + i, vmul(vmul(vload(x + i), s), vload(w + i)));
  if (i < dim) {
    const int n = static_cast<int>(dim - i);
    vstore_n(out + i, vmul(vmul(vload_n(x + i, n), s), vload_n(w + i, n)), n);
  }
}

inline V16 vsilu_mul(V16 g, V16 u) {
  const V16 e = vexp(vsub(vzero(), g));
  return vmul(vdiv(g, vadd(vset1(1.0f), e)), u);
}

inline void silu_mul_row(const float* gate, const float* up, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) vstore(out + i, vsilu_mul(vload(gate + i), vload(up + i)));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    vstore_n(out + i, vsilu_mul(vload_n(gate + i, r), vload_n(up + i, r)), r);
  }
}

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

// The table this tier exports.
inline const baton::cpu::KernelTable& make_table(const char* name) {
  static const baton::cpu::KernelTable table{name, &gemm, &rms_norm_row, &silu_mul_row,
                                             &attention, &dot, &exp_inplace};
  return table;
}

// The same table with another GEMM (a tier that only changes how some GEMMs are computed).
inline baton::cpu::KernelTable make_table_with_gemm(const char* name,
                                                    void (*gemm_fn)(const baton::cpu::GemmArgs&, std::int64_t,
                                                                    std::int64_t)) {
  return baton::cpu::KernelTable{name, gemm_fn, &rms_norm_row, &silu_mul_row, &attention, &dot, &exp_inplace};
}
