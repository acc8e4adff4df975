#include "engine/sample/random.h"

namespace baton {
namespace {

// The constants of Random123's reference implementation.
constexpr std::uint32_t kMul0 = 0xD2511F53u;
constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

}  // namespace

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ key[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ key[1], static_cast<std::uint32_t>(p0)};
  }
  return c;
}

double RandomStream::uniform() {
  const auto pos = static_cast<std::uint64_t>(position_);
  const std::array<std::uint32_t, 4> bits =
      philox4x32_10({index_++, static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(pos >> 32),
                     static_cast<std::uint32_t>(purpose_)},
                    {static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32)});
  const std::uint64_t word = (static_cast<std::uint64_t>(bits[0]) << 32) | bits[1];
  return static_cast<double>((word >> 11) + 1) * 0x1.0p-53;
}

}  // namespace baton
