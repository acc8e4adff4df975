#include "engine/model/linear_attention.h"

namespace baton {

void linear_attention(Backend& b, const ModelConfig& c, const LayerWeights& w, const TensorView& x,
                      const LayerScratch& s, const RecurrentBatch& batch, const LayerCache& cache,
                      const TensorView& out) {
  const LinearAttentionConfig& la = c.linear_attention;
  const std::int64_t kd = la.key_dim(), vd = la.value_dim(), nv = la.num_value_heads;
  const std::int64_t conv = la.conv_channels();
  // projected: [q (kd) | k (kd) | v (vd) | z (vd) | b (nv) | a (nv)] (the loader's row order).
  b.linear(x, w.in_proj, TensorView{}, s.projected);
  b.causal_conv1d(s.projected.slice_last(0, conv), w.conv, TensorView{}, cache.conv_state, batch, s.mixed);
  const TensorView q = s.mixed.slice_last(0, kd).split_last(la.num_key_heads);
  const TensorView k = s.mixed.slice_last(kd, 2 * kd).split_last(la.num_key_heads);
  const TensorView v = s.mixed.slice_last(2 * kd, conv).split_last(nv);
  const TensorView z = s.projected.slice_last(conv, conv + vd).split_last(nv);
  const TensorView beta_logit = s.projected.slice_last(conv + vd, conv + vd + nv);
  const TensorView decay_logit = s.projected.slice_last(conv + vd + nv, conv + vd + 2 * nv);
  b.gated_delta_rule(q, k, v, beta_logit, decay_logit, w.a_log, w.dt_bias, cache.recurrent_state, batch, s.core);
  b.gated_rms_norm(s.core, z, w.gated_norm, c.rms_norm_eps, s.core);
  b.linear(s.core.reshape({x.dim(0), vd}), w.out_proj, TensorView{}, out);
}

}  // namespace baton
