#include "security/random.h"

#include <sys/random.h>

#include <cerrno>
#include <vector>

#include "common/status.h"

namespace baton::security {
namespace {

void fill(unsigned char* out, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = getrandom(out + done, n - done, 0);
    if (got < 0 && errno == EINTR) continue;
    BATON_CHECK(got > 0, "getrandom failed: errno ", errno);
    done += static_cast<std::size_t>(got);
  }
}

}  // namespace

std::string random_hex(std::size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::vector<unsigned char> raw(bytes);
  fill(raw.data(), raw.size());
  std::string out(2 * bytes, '0');
  for (std::size_t i = 0; i < bytes; ++i) {
    out[2 * i] = kDigits[raw[i] >> 4];
    out[2 * i + 1] = kDigits[raw[i] & 15];
  }
  return out;
}

std::uint64_t random_u64() {
  std::uint64_t v = 0;
  fill(reinterpret_cast<unsigned char*>(&v), sizeof(v));
  return v;
}

}  // namespace baton::security
