// Activation kernels: the kernels' own exp (about 1 ulp, identical on every tier; softmax and
// the sampler use it) and SiLU-and-multiply for the gated MLP.
// Part of the tier kernels: included only by kernels_impl.h, inside a tier's namespace after that
// tier's simd16_*.h (never on its own; it has no include guard of its own and no includes). The
// numerical contract is in kernels_impl.h.

// ---- exp and activations -------------------------------------------------------------------------

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
