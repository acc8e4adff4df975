#include "engine/model/rope.h"

#include <cmath>
#include <numbers>

namespace baton {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const std::int32_t dim = c.rotary_dim > 0 ? c.rotary_dim : c.head_dim, half = dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (std::int32_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<std::size_t>(i)] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  const RopeScaling& rs = c.rope_scaling;
  switch (rs.type) {
    case RopeScaling::Type::kNone:
      break;
    case RopeScaling::Type::kLinear:
      for (float& f : inv) f = static_cast<float>(f / rs.factor);
      break;
    case RopeScaling::Type::kLlama3: {
      // Low frequencies (long wavelengths) are divided by `factor`, high ones kept, and the band
      // between is interpolated linearly in orig_max / wavelength.
      const double low_wavelen = rs.original_max_position_embeddings / rs.low_freq_factor;
      const double high_wavelen = rs.original_max_position_embeddings / rs.high_freq_factor;
      for (float& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
          f = static_cast<float>(f / rs.factor);
        } else {
          const double smooth = (rs.original_max_position_embeddings / wavelen - rs.low_freq_factor) /
                                (rs.high_freq_factor - rs.low_freq_factor);
          f = static_cast<float>((1.0 - smooth) * f / rs.factor + smooth * f);
        }
      }
      break;
    }
  }
  return inv;
}

}  // namespace baton
