#include "kernels/cpu/argmax.h"

#include <cstring>

namespace baton::cpu {

// Two passes over 4-lane GCC vectors, four of them side by side (16 lanes): the compiler left the
// same loop written over arrays scalar (one maxss and one NaN test per entry), and lowers wider
// generic vectors to scalars too on the baseline x86-64 this file is built for.
std::optional<std::size_t> argmax_lowest(std::span<const float> v) {
  using Floats = float __attribute__((vector_size(16)));
  using Ints = int __attribute__((vector_size(16)));
  constexpr std::size_t kVectors = 4, kLanes = 4 * kVectors;
  const std::size_t n = v.size();
  Floats lane[kVectors];
  Ints nan[kVectors];
  for (std::size_t u = 0; u < kVectors; ++u) {
    lane[u] = Floats{v[0], v[0], v[0], v[0]};
    nan[u] = Ints{};
  }
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t u = 0; u < kVectors; ++u) {
      Floats x;
      std::memcpy(&x, v.data() + i + 4 * u, sizeof(x));
      lane[u] = x > lane[u] ? x : lane[u];  // per lane, as a scalar "x > m ? x : m" scan: NaN never wins
      nan[u] |= x != x;
    }
  }
  float m = v[0];
  int any_nan = 0;
  for (std::size_t u = 0; u < kVectors; ++u) {
    for (int j = 0; j < 4; ++j) {
      m = lane[u][j] > m ? lane[u][j] : m;
      any_nan |= nan[u][j];
    }
  }
  for (; i < n; ++i) {
    m = v[i] > m ? v[i] : m;
    any_nan |= v[i] != v[i];
  }
  if (any_nan != 0) return std::nullopt;
  // m is an entry of v (no NaN): the first one equal to it is the argmax (-0 == +0 keeps the first,
  // as a strict > scan does).
  const Floats target = {m, m, m, m};
  std::size_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    Ints hit{};
    for (std::size_t u = 0; u < kVectors; ++u) {
      Floats x;
      std::memcpy(&x, v.data() + k + 4 * u, sizeof(x));
      hit |= x == target;
    }
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) break;
  }
  while (v[k] != m) ++k;
  return k;
}

}  // namespace baton::cpu
