// Unpredictable values from the operating system's entropy (getrandom(2)): request ids, per-request
// capabilities and the seeds of requests that gave none. A value drawn here cannot be guessed from
// earlier ones (unlike a counter or a generator seeded at start-up).
// Must not: fall back to a predictable source (it aborts instead; getrandom does not fail on Linux
// once the pool is initialised).
#pragma once

#include <cstdint>
#include <string>

namespace baton::security {

// `bytes` random bytes as 2 * bytes lower-case hex digits.
std::string random_hex(std::size_t bytes);
std::uint64_t random_u64();

}  // namespace baton::security
