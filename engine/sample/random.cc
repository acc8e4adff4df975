#include "engine/sample/random.h"

#include "kernels/philox.h"

namespace baton {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
  const Philox4x32 out = philox4x32_10_block(Philox4x32{{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
  return {out.v[0], out.v[1], out.v[2], out.v[3]};
}

double RandomStream::uniform() {
  return philox_uniform(seed_, static_cast<std::uint32_t>(purpose_), position_, index_++);
}

}  // namespace baton
