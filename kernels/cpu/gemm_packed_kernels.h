// GEMM over packed weights (packed_weights.h): a register-blocked micro-kernel that keeps an
// MR-row by NP-panel block of outputs (MR x 16 NP floats) in registers and streams the NP panels'
// weights once for all MR rows, broadcasting one x element per row and k. A row tile never holds
// more than kPackedRows rows; a step of M rows (a decode batch, k + 1 verification tokens, a
// prefill chunk) reads each group of NP panels from memory once and re-reads it from cache for
// further row tiles.
//
// Numerical contract (batch invariance, tier identity): output element (m, c) is acc = 0, then
// acc = fma(x[m][kk], W[c][kk], acc) for kk = 0, 1, ..., k - 1 in order, then acc + bias[c]. Each
// element lives in one lane of one accumulator from start to end, so nothing depends on MR, NP,
// the row tile, the rows riding along, the thread split or the tier (V16 lanes are exact).
// This is a different order from gemm_kernels.h's dot-product form: a weight is either packed
// or not for its whole life, so every token sees the same order.
// Part of the tier kernels: included only by kernels_impl.h, inside a tier's namespace after that
// tier's simd16_*.h.

// ---- GEMM over packed weight panels ------------------------------------------------------------

template <baton::DType W>
struct PanelLoad;
template <>
struct PanelLoad<baton::DType::kBF16> {
  using T = std::uint16_t;
  // One k-pair of a panel: 16 columns' W[c][2q] (even) and W[c][2q + 1] (odd).
  static void pair(const T* p, V16& even, V16& odd) { vload_bf16_pairs(p, even, odd); }
};
template <>
struct PanelLoad<baton::DType::kF32> {
  using T = float;
  static void pair(const T* p, V16& even, V16& odd) {
    even = vload(p);
    odd = vload(p + 16);
  }
};

// Where a tile that reads its panels to their end (`finish`) and prefetches `ahead` pairs within
// them (ahead < pairs: the first row tile's stream) starts prefetching the next panel group's:
// past its own panel's end, panel j's prefetch address would land in panel j + 1, which this
// tile already reads; shifted by NP - 1 panels it lands in the same panel of the next group,
// whose tile would otherwise start every stream but the first cold. `pairs` (no wrap) elsewhere.
// gemm_bench over the 110M model's matrices, two threads, medians of 4-6 alternating runs, new /
// old time: BF16 weights 8 rows 0.93, 5 rows 0.95, 1-2 rows 0.98; F32 weights 0.91-0.93 at 1, 5
// and 8 rows; the BF16-dot tier 0.90-0.92; the family's L3-resident target 0.96-0.99.
inline std::int64_t packed_prefetch_wrap_from(std::int64_t pairs, std::int64_t ahead, bool finish) {
  return finish && ahead > 0 && ahead < pairs ? pairs - ahead : pairs;
}

// Rows [0, MR) of x times panels [0, NP) (panel stride ps elements) over k in [0, k): x and w
// already point at the block's first k. With `resume` the accumulators start from y (the partial
// sums an earlier k block stored there: exact, so the chain is unchanged); with `finish` bias is
// added. The last panel has last_cols (1..16) real columns. Each panel's stream is prefetched
// `ahead` k-pairs ahead (0: not at all; see packed_prefetch_ahead).
template <baton::DType W, int MR, int NP>
void packed_tile(const float* x, std::int64_t ldx, const typename PanelLoad<W>::T* w, std::int64_t ps,
                 std::int64_t k, const float* bias, float* y, std::int64_t ldy, int last_cols, bool resume,
                 bool finish, std::int64_t ahead) {
  V16 acc[MR][NP];
  for (int j = 0; j < NP; ++j) {
    const int cols = j == NP - 1 ? last_cols : 16;
    for (int i = 0; i < MR; ++i) {
      if (!resume) {
        acc[i][j] = vzero();
      } else {
        acc[i][j] = cols == 16 ? vload(y + i * ldy + j * 16) : vload_n(y + i * ldy + j * 16, cols);
      }
    }
  }
  const std::int64_t pairs = k / 2;
  const std::int64_t wrap_from = packed_prefetch_wrap_from(pairs, ahead, finish);
  for (std::int64_t q = 0; q < pairs; ++q) {
    V16 we[NP], wo[NP];
    const std::int64_t wrap = q < wrap_from ? 0 : (NP - 1) * ps;
    for (int j = 0; j < NP; ++j) {
      if (ahead > 0) __builtin_prefetch(w + wrap + j * ps + (q + ahead) * 32);
      PanelLoad<W>::pair(w + j * ps + q * 32, we[j], wo[j]);
    }
    for (int i = 0; i < MR; ++i) {
      const V16 xe = vset1(x[i * ldx + 2 * q]);
      const V16 xo = vset1(x[i * ldx + 2 * q + 1]);
      for (int j = 0; j < NP; ++j) acc[i][j] = vfma(xo, wo[j], vfma(xe, we[j], acc[i][j]));
    }
  }
  if (k % 2 != 0) {  // the last k alone (its pair partner is zero padding, skipped)
    V16 we[NP], wo[NP];
    for (int j = 0; j < NP; ++j) PanelLoad<W>::pair(w + j * ps + pairs * 32, we[j], wo[j]);
    for (int i = 0; i < MR; ++i) {
      const V16 xe = vset1(x[i * ldx + k - 1]);
      for (int j = 0; j < NP; ++j) acc[i][j] = vfma(xe, we[j], acc[i][j]);
    }
  }
  for (int j = 0; j < NP; ++j) {
    const int cols = j == NP - 1 ? last_cols : 16;
    V16 b = vzero();
    if (finish && bias != nullptr) b = cols == 16 ? vload(bias + j * 16) : vload_n(bias + j * 16, cols);
    for (int i = 0; i < MR; ++i) {
      const V16 r = finish && bias != nullptr ? vadd(acc[i][j], b) : acc[i][j];
      if (cols == 16) {
        vstore(y + i * ldy + j * 16, r);
      } else {
        vstore_n(y + i * ldy + j * 16, r, cols);
      }
    }
  }
}

template <baton::DType W, int MRMax, int NPMax>
void packed_tile_dyn(const float* x, std::int64_t ldx, const typename PanelLoad<W>::T* w, std::int64_t ps,
                     std::int64_t k, const float* bias, float* y, std::int64_t ldy, int last_cols, bool resume,
                     bool finish, std::int64_t ahead, int mr, int np) {
  if constexpr (MRMax > 0 && NPMax > 0) {
    if (mr < MRMax) {
      packed_tile_dyn<W, MRMax - 1, NPMax>(x, ldx, w, ps, k, bias, y, ldy, last_cols, resume, finish, ahead, mr, np);
    } else if (np < NPMax) {
      packed_tile_dyn<W, MRMax, NPMax - 1>(x, ldx, w, ps, k, bias, y, ldy, last_cols, resume, finish, ahead, mr, np);
    } else {
      packed_tile<W, MRMax, NPMax>(x, ldx, w, ps, k, bias, y, ldy, last_cols, resume, finish, ahead);
    }
  }
}

// How far ahead (in k-pairs) row tile m prefetches its panels' streams, where the next block this
// thread computes (the next k block of these panels, or the next group's first) starts
// `next_block` pairs after this one. The first tile reads the block from memory: 32 pairs ahead
// (2 KiB of BF16 per panel; the panels are a panel apart, too far apart for the hardware
// prefetcher to run that far ahead of all of them). The second, while the block is in cache,
// fetches the whole next block, so that the next first tile does not wait for memory line by line
// (measured with the earlier 24 KiB blocks, 32 rows of the 110M model's GEMMs on one thread: 6-7%
// faster on the BF16-dot tier, 2% on the compute-bound exact tiers). Later tiles read cache only.
inline std::int64_t packed_prefetch_ahead(std::int64_t m, std::int64_t next_block) {
  return m == 0 ? 32 : m == kPackedRows ? next_block : 0;
}

// Panels per register tile for a call of `rows` rows. An output element is one serial chain of
// multiply-adds, so only a tile's rows x panels accumulators can be in flight at once; with one or
// two rows the default kPackedPanels leaves the FMA units waiting on latency when the weights come
// from cache (a small model's), so such calls take wider tiles. Not too wide: each panel is a
// separate stream from memory, and a core keeps fewer streams going at full speed. On two Zen 5
// cores, a single row over the 110M model's matrices streamed at 0.85 of the probed read bandwidth
// with 4 panels per tile against 0.72 with 8 (one thread, medians of five alternating runs; 2 was
// bound by the chains' latency), and decode_bench's paired batch-1 fraction rose from 0.57-0.81
// to 0.75-0.86 over three paired runs; the family's L3-resident target was within 2%.
// A verification's k + 1 rows (3 to 5 for k = 2..4) take 4 panels instead of 3 on AVX-512 (20
// accumulators, no spills): gemm_bench over the 110M model's matrices, two threads, medians of
// eight alternating runs, new / old time: 5 rows 0.87, 4 rows 0.96, 3 rows 0.98 (2 rows, the
// same code in both, 1.00); over the family's L3-resident target 1.00, 0.96 and 0.93.
// Calls of more rows tile them by kPackedRows, whatever their last tile's size.
inline int packed_group_panels(std::int64_t rows) {
  if (rows <= 2) return rows == 1 ? kPackedPanelsOneRow : kPackedPanelsTwoRows;
  return rows <= kPackedFewRows ? kPackedPanelsFewRows : kPackedPanels;
}

// Panel groups of `group` panels outside. With one row tile, its whole k at once: the weights
// stream from memory once. With several, k in blocks of block_k (even) whose panel slice stays in
// L2 while every row tile passes over it (partial sums wait in y between blocks). Calls
// tile(m, mr, p, np, k0, kb, last_cols, bias, resume, finish, ahead) for row tile [m, m + mr),
// panels [p, p + np) and k in [k0, k0 + kb) of k; both packed GEMMs (this one and the BF16-dot
// tier's) walk their tiles with it.
template <class Tile>
void for_each_packed_tile(const baton::cpu::PackedGemmArgs& a, std::int64_t k, std::int64_t block_k, int group,
                          std::int64_t panel_begin, std::int64_t panel_end, Tile&& tile) {
  const std::int64_t kc = a.rows > kPackedRows ? block_k : k;
  // Pairs from a panel's block to the same block of the panel `group` panels on.
  const std::int64_t group_pairs = group * baton::cpu::packed_k(k) / 2;
  for (std::int64_t p = panel_begin; p < panel_end; p += group) {
    const int np = static_cast<int>(std::min<std::int64_t>(group, panel_end - p));
    const int last_cols = static_cast<int>(std::min<std::int64_t>(16, a.n - (p + np - 1) * 16));
    const float* bias = a.bias != nullptr ? a.bias + p * 16 : nullptr;
    for (std::int64_t k0 = 0; k0 < k; k0 += kc) {
      const std::int64_t kb = std::min(kc, k - k0);
      const bool finish = k0 + kb == k;
      const std::int64_t next_block = finish ? group_pairs - k0 / 2 : kc / 2;
      for (std::int64_t m = 0; m < a.rows; m += kPackedRows) {
        const int mr = static_cast<int>(std::min<std::int64_t>(kPackedRows, a.rows - m));
        tile(m, mr, p, np, k0, kb, last_cols, bias, /*resume=*/k0 > 0, finish, packed_prefetch_ahead(m, next_block));
      }
    }
  }
}

// k per block for elements of `bytes` (a k-pair of one panel is 32 elements), kept even: about
// 256 KiB of panel slice, a quarter of a 1 MiB L2, so that the row tiles after the first read it
// from L2, beside their own rows of x. Most matrices' k fits
// in one block (AVX-512: 2730 BF16 elements; a panel group of the 110M model's widest, k = 2048,
// is 192 KiB); an 8B model's down projection (k = 14336) takes six. Measured on two Zen 5 cores
// (1 MiB L2 each) against blocks of 24 KiB, which the row tiles re-read from L1: 7-12% less time
// for the 110M model's GEMMs at 32 rows, 3-18% at 512, 8-13% at 2048, 3-10% for k = 14336 at 32
// rows, where the whole k in one block (1.3 MiB a group) was 11-17% slower than 24 KiB blocks.
constexpr std::int64_t packed_block_k(std::int64_t bytes) {
  return (256 * 1024 / (16 * kPackedPanels * bytes)) / 2 * 2;
}

template <baton::DType W>
void gemm_packed_typed(const baton::cpu::PackedGemmArgs& a, std::int64_t panel_begin, std::int64_t panel_end) {
  using T = typename PanelLoad<W>::T;
  const T* w = static_cast<const T*>(a.w);
  const std::int64_t ps = baton::cpu::panel_elements(a.k);
  for_each_packed_tile(a, a.k, packed_block_k(sizeof(T)), packed_group_panels(a.rows), panel_begin, panel_end,
                       [&](std::int64_t m, int mr, std::int64_t p, int np, std::int64_t k0, std::int64_t kb,
                           int last_cols, const float* bias, bool resume, bool finish, std::int64_t ahead) {
                         const float* x = a.x + m * a.ldx + k0;
                         const T* wp = w + p * ps + k0 * 16;
                         float* y = a.y + m * a.ldy + p * 16;
                         if (mr == 1) {
                           packed_tile_dyn<W, 1, kPackedPanelsOneRow>(x, a.ldx, wp, ps, kb, bias, y, a.ldy, last_cols,
                                                                      resume, finish, ahead, mr, np);
                         } else if (mr == 2) {
                           packed_tile_dyn<W, 2, kPackedPanelsTwoRows>(x, a.ldx, wp, ps, kb, bias, y, a.ldy, last_cols,
                                                                       resume, finish, ahead, mr, np);
                         } else if (a.rows <= kPackedFewRows) {
                           packed_tile_dyn<W, kPackedFewRows, kPackedPanelsFewRows>(x, a.ldx, wp, ps, kb, bias, y, a.ldy,
                                                                                    last_cols, resume, finish, ahead, mr,
                                                                                    np);
                         } else {
                           packed_tile_dyn<W, kPackedRows, kPackedPanels>(x, a.ldx, wp, ps, kb, bias, y, a.ldy,
                                                                          last_cols, resume, finish, ahead, mr, np);
                         }
                       });
}

inline void gemm_packed(const baton::cpu::PackedGemmArgs& a, std::int64_t panel_begin, std::int64_t panel_end) {
  switch (a.w_dtype) {
    case baton::DType::kF32: gemm_packed_typed<baton::DType::kF32>(a, panel_begin, panel_end); break;
    case baton::DType::kBF16: gemm_packed_typed<baton::DType::kBF16>(a, panel_begin, panel_end); break;
    default: break;  // the backend packs only F32 and BF16
  }
}
