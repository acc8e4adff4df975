// Helpers shared by the CPU kernel tests: the ISA tiers this machine can run, random data.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/dtype.h"

namespace baton::cpu::testing {

inline std::vector<CpuIsa> supported_isas() {
  const CpuFeatures f = CpuFeatures::detect();
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (f.supports(isa)) out.push_back(isa);
  }
  return out;
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights of the given dtype holding `values` rounded to that dtype; `rounded` gets them as f32.
inline std::vector<std::uint8_t> encode(const std::vector<float>& values, DType dtype, std::vector<float>* rounded) {
  std::vector<std::uint8_t> bytes(values.size() * dtype_size(dtype));
  rounded->resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(bytes.data())[i] = values[i];
      (*rounded)[i] = values[i];
    } else if (dtype == DType::kBF16) {
      const std::uint16_t h = f32_to_bf16(values[i]);
      reinterpret_cast<std::uint16_t*>(bytes.data())[i] = h;
      (*rounded)[i] = bf16_to_f32(h);
    } else {
      const std::uint16_t h = f32_to_f16(values[i]);
      reinterpret_cast<std::uint16_t*>(bytes.data())[i] = h;
      (*rounded)[i] = f16_to_f32(h);
    }
  }
  return bytes;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace baton::cpu::testing
