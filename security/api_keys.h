// The public API's keys (--api-keys-file), checked the same way on gRPC (`authorization: Bearer
// KEY` metadata) and HTTP (the Authorization header).
//
// The file holds one key per line, either the key itself or its SHA-256 as `sha256:<64 hex>` (so
// the file need not hold secrets); blank lines and lines starting with '#' are skipped. A
// presented key is hashed and its digest compared with every stored digest in constant time
// (CRYPTO_memcmp, no early exit), so neither timing nor the order of the file tells anything
// about a key. A matched key is known by its KeyId: the first 16 hex digits of its SHA-256, which
// names the caller in quotas, request ownership and logs without revealing the key.
//
// Keys never come from argv (visible to every user in `ps`); clients read theirs from
// BATON_API_KEY. Must not: log keys or presented values.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::security {

using KeyId = std::string;  // 16 hex digits

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: every caller is anonymous ("")
  // INVALID_ARGUMENT naming the file and line for a malformed hash or an empty file.
  static absl::StatusOr<ApiKeys> from_file(const std::string& path);
  static ApiKeys from_keys(const std::vector<std::string>& keys);

  bool enabled() const { return !digests_.empty(); }
  std::size_t size() const { return digests_.size(); }
  // The matching key's id, or nullopt. Takes the same time whichever key (if any) matches.
  std::optional<KeyId> match(std::string_view presented) const;

 private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

// The key in an Authorization header or metadata entry: the token of `Bearer TOKEN`, or the
// password of `Basic base64(user:password)` (what a browser sends for the live page after its
// login prompt); schemes are case-insensitive. nullopt for anything else.
std::optional<std::string> presented_key(std::string_view authorization);

// SHA-256 of `text` as 64 lower-case hex digits (what a hashed key file line holds).
std::string sha256_hex(std::string_view text);

// The key a client sends: BATON_API_KEY from the environment, "" when unset.
std::string api_key_from_environment();

}  // namespace baton::security
