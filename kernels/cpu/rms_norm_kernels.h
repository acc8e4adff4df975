// RMSNorm over one row (the sum of squares is the canonical dot product, so it is
// batch-invariant and tier-identical like the GEMM).
// Part of the tier kernels: included only by kernels_impl.h, inside a tier's namespace after that
// tier's simd16_*.h (never on its own; it has no include guard of its own and no includes). The
// numerical contract is in kernels_impl.h.

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
