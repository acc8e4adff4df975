// RoPE frequencies for a ModelConfig: inv_freq[i] = 1 / theta^(2i / rotary_dim) (rotary_dim =
// head_dim unless the rotary is partial), computed in f32 the way the Hugging Face reference does,
// then adjusted by the config's rope scaling (linear, llama3).
#pragma once

#include <vector>

#include "engine/model/config.h"

namespace baton {

std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace baton
