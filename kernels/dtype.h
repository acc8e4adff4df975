// Element types the kernels understand, and exact host-side conversions between them.
//
// BF16 and F16 are stored as raw uint16_t bit patterns. Widening to f32 is exact; narrowing rounds
// to nearest even (the same rule PyTorch and the hardware conversion instructions use).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace baton {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kBool };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

// Names as safetensors spells them ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_safetensors(std::string_view name);

inline float bf16_to_f32(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

}  // namespace baton
