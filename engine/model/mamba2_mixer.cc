#include "engine/model/mamba2_mixer.h"

namespace baton {

void mamba2_mixer(Backend& b, const ModelConfig& c, const LayerWeights& w, const TensorView& x, const LayerScratch& s,
                  const RecurrentBatch& batch, const LayerCache& cache, const TensorView& out) {
  const Mamba2Config& m = c.mamba2;
  const std::int64_t inner = m.inner(), conv = m.conv_channels(), bc = std::int64_t{m.num_groups} * m.state_size;
  // projected: [z (inner) | x (inner), B (groups * state), C (groups * state) | dt (heads)], as stored.
  b.linear(x, w.in_proj, TensorView{}, s.projected);
  b.causal_conv1d(s.projected.slice_last(inner, inner + conv), w.conv, w.conv_bias, cache.conv_state, batch, s.mixed);
  const TensorView xs = s.mixed.slice_last(0, inner).split_last(m.num_heads);
  const TensorView bs = s.mixed.slice_last(inner, inner + bc).split_last(m.num_groups);
  const TensorView cs = s.mixed.slice_last(inner + bc, conv).split_last(m.num_groups);
  const TensorView z = s.projected.slice_last(0, inner);
  const TensorView dt = s.projected.slice_last(inner + conv, inner + conv + m.num_heads);
  b.ssd_recurrence(xs, dt, bs, cs, w.a_log, w.dt_bias, w.d_skip, m.dt_min, m.dt_max, cache.recurrent_state, batch,
                   s.core);
  const TensorView y = s.core.reshape({x.dim(0), inner});
  b.gated_group_rms_norm(y, z, w.gated_norm, inner / m.num_groups, c.rms_norm_eps, y);
  b.linear(y, w.out_proj, TensorView{}, out);
}

}  // namespace baton
