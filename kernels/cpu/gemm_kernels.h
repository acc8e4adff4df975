// GEMM kernels: y = x W^T (+ bias) over F32/BF16/F16 weights, read as stored (row-major [n, k]),
// in dot-product tiles of MR rows of x by NR rows of W; BF16 in pair order; and the canonical
// dot product other kernels (norms, attention scores, the sampler) reduce with.
// Part of the tier kernels: included only by kernels_impl.h, inside a tier's namespace after that
// tier's simd16_*.h (never on its own; it has no include guard of its own and no includes). The
// numerical contract is in kernels_impl.h.

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
