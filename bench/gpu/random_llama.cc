#include "bench/gpu/random_llama.h"

namespace baton::bench {

nlohmann::json llama31_8b_config(int layers, bool small) {
  return nlohmann::json{{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"hidden_act", "silu"},
                        {"hidden_size", small ? 256 : 4096},
                        {"intermediate_size", small ? 512 : 14336},
                        {"num_hidden_layers", small ? 2 : layers},
                        {"num_attention_heads", small ? 4 : 32},
                        {"num_key_value_heads", small ? 2 : 8},
                        {"head_dim", small ? 64 : 128},
                        {"vocab_size", small ? 1024 : 128256},
                        {"max_position_embeddings", 131072},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 500000.0},
                        {"rope_scaling",
                         {{"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192},
                          {"rope_type", "llama3"}}},
                        {"attention_bias", false},
                        {"mlp_bias", false},
                        {"tie_word_embeddings", false},
                        {"torch_dtype", "bfloat16"},
                        {"bos_token_id", small ? 1 : 128000},
                        {"eos_token_id", small ? 2 : 128001}};
}

float host_uniform_pm1(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

ModelWeights make_weights(const ModelConfig& c, RandomWeights& rw) {
  ModelWeights w;
  const std::int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  w.embed = rw.matrix(c.vocab_size, h, 1.0f);
  w.final_norm = rw.ones(h);
  w.lm_head = rw.linear(c.vocab_size, h);
  for (std::int32_t i = 0; i < c.num_layers; ++i) {
    LayerWeights l;
    l.input_norm = rw.ones(h);
    l.qkv = rw.linear(q + 2 * kv, h);
    l.o_proj = rw.linear(h, q);
    l.post_norm = rw.ones(h);
    l.gate_up = rw.linear(2 * inter, h);
    l.down = rw.linear(h, inter);
    w.layers.push_back(l);
  }
  return w;
}

}  // namespace baton::bench
