#include "security/capability.h"

#include <openssl/crypto.h>

#include "common/status.h"
#include "security/random.h"

namespace baton::security {

std::string new_capability() { return random_hex(16); }

bool capability_matches(std::string_view expected, std::string_view presented) {
  if (expected.empty() || expected.size() != presented.size()) return false;
  return CRYPTO_memcmp(expected.data(), presented.data(), expected.size()) == 0;
}

absl::Status check_capability(std::string_view expected, std::string_view presented, std::string_view what,
                              std::string_view request_id) {
  if (capability_matches(expected, presented)) return absl::OkStatus();
  return absl::PermissionDeniedError(str_cat(what, " of request '", request_id, "': ",
                                             presented.empty() ? "no capability given" : "the capability does not match",
                                             " (only the peer the router chose for it may do this)"));
}

}  // namespace baton::security
