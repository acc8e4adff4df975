#include "kv_transfer/ucx_net_devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>

#include "common/status.h"

namespace baton::kv {
namespace {

bool same_address(const sockaddr* a, const addrinfo* b) {
  if (a == nullptr || a->sa_family != b->ai_family) return false;
  if (a->sa_family == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(b->ai_addr)->sin_addr, sizeof(in_addr)) == 0;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b->ai_addr)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> restrict_ucx_to_host(const std::string& host, std::string* why) {
  const auto skip = [&](const std::string& reason) -> std::string {
    if (why != nullptr) *why = reason;
    return "";
  };
  if (const char* set = std::getenv("UCX_NET_DEVICES"); set != nullptr && *set != '\0') {
    return skip(str_cat("UCX_NET_DEVICES=", set, " is set"));
  }
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    return skip(str_cat("--host ", host.empty() ? "\"\"" : host, " is every address"));
  }
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_family = AF_UNSPEC;
  addrinfo* resolved = nullptr;
  std::string literal = host;
  if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']') literal = literal.substr(1, literal.size() - 2);
  if (getaddrinfo(literal.c_str(), nullptr, &hints, &resolved) != 0 || resolved == nullptr) {
    // A host name: the node's own listener resolves it; UCX keeps its default.
    return skip(str_cat("--host ", host, " is not an address literal"));
  }
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) {
    freeaddrinfo(resolved);
    return absl::InternalError("getifaddrs failed: cannot tell which device holds --host");
  }
  std::string device;
  for (const ifaddrs* i = interfaces; i != nullptr && device.empty(); i = i->ifa_next) {
    if (same_address(i->ifa_addr, resolved)) device = i->ifa_name;
  }
  freeifaddrs(interfaces);
  freeaddrinfo(resolved);
  if (device.empty()) return absl::NotFoundError(str_cat("no network device of this machine has --host ", host));
  ::setenv("UCX_NET_DEVICES", device.c_str(), 1);
  if (why != nullptr) *why = str_cat("the device of --host ", host);
  return device;
}

}  // namespace baton::kv
