#include "security/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/status.h"

namespace baton::security {
namespace {

using Digest = std::array<unsigned char, 32>;

Digest digest_of(std::string_view text) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), d.data());
  return d;
}

std::string hex(const unsigned char* data, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

std::optional<Digest> parse_hex_digest(std::string_view text) {
  if (text.size() != 64) return std::nullopt;
  Digest d;
  for (std::size_t i = 0; i < 32; ++i) {
    int v = 0;
    for (int h = 0; h < 2; ++h) {
      const char c = absl::ascii_tolower(text[2 * i + h]);
      int nibble = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (nibble < 0) return std::nullopt;
      v = v * 16 + nibble;
    }
    d[i] = static_cast<unsigned char>(v);
  }
  return d;
}

}  // namespace

std::string sha256_hex(std::string_view text) {
  const Digest d = digest_of(text);
  return hex(d.data(), d.size());
}

absl::StatusOr<ApiKeys> ApiKeys::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(str_cat("cannot read the API keys file ", path));
  ApiKeys keys;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string entry(absl::StripAsciiWhitespace(line));
    if (entry.empty() || entry[0] == '#') continue;
    if (absl::StartsWith(entry, "sha256:")) {
      auto d = parse_hex_digest(std::string_view(entry).substr(7));
      if (!d) {
        return absl::InvalidArgumentError(
            str_cat("the API keys file ", path, ", line ", number, ": 'sha256:' must be followed by 64 hex digits"));
      }
      keys.digests_.push_back(*d);
    } else {
      keys.digests_.push_back(digest_of(entry));
    }
  }
  if (keys.digests_.empty()) return absl::InvalidArgumentError(str_cat("the API keys file ", path, " holds no key"));
  return keys;
}

ApiKeys ApiKeys::from_keys(const std::vector<std::string>& list) {
  ApiKeys keys;
  for (const std::string& k : list) keys.digests_.push_back(digest_of(k));
  return keys;
}

std::optional<KeyId> ApiKeys::match(std::string_view presented) const {
  const Digest d = digest_of(presented);
  std::size_t found = digests_.size();
  for (std::size_t i = 0; i < digests_.size(); ++i) {
    // No early exit, and a branch-free choice: every stored digest is compared every time.
    const bool equal = CRYPTO_memcmp(d.data(), digests_[i].data(), d.size()) == 0;
    found = equal ? i : found;
  }
  if (found == digests_.size()) return std::nullopt;
  return hex(digests_[found].data(), 8);
}

std::optional<std::string> presented_key(std::string_view authorization) {
  const std::size_t space = authorization.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view scheme = authorization.substr(0, space);
  std::string_view value = authorization.substr(space + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  const absl::string_view name(scheme.data(), scheme.size());
  if (absl::EqualsIgnoreCase(name, "bearer")) return std::string(value);
  if (!absl::EqualsIgnoreCase(name, "basic") || value.size() % 4 != 0 || value.size() > 4096) return std::nullopt;
  std::string decoded(value.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                reinterpret_cast<const unsigned char*>(value.data()), static_cast<int>(value.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding's zero bytes.
  std::size_t length = static_cast<std::size_t>(n);
  for (std::size_t i = value.size(); i > 0 && value[i - 1] == '=' && length > 0; --i) --length;
  decoded.resize(length);
  const std::size_t colon = decoded.find(':');
  if (colon == std::string::npos || colon + 1 == decoded.size()) return std::nullopt;
  return decoded.substr(colon + 1);
}

std::string api_key_from_environment() {
  const char* key = std::getenv("BATON_API_KEY");
  return key != nullptr ? std::string(key) : std::string();
}

}  // namespace baton::security
