// Node discovery through DNS (`--prefill-dns NAME:PORT`, `--decode-dns NAME:PORT`): on a thread of
// its own, every refresh interval, each name is looked up and the node pool reconciled with the
// answers. Made for Kubernetes headless Services, whose name has one A/AAAA record per ready pod:
// an address that appears is added as a node of that kind (NodeSource::kDns); one that this
// discovery added and that no longer resolves is removed (requests running there finish). A
// failing lookup (NXDOMAIN while no pod is ready, SERVFAIL, a timeout) keeps the name's last known
// addresses; it is logged once per change, naming the name.
//
// The resolver is a std::function (name -> IP literals), so that reconciliation can be tested with
// changing answers; resolve_with_getaddrinfo() is the real one.
//
// Thread-safety: start/stop/refresh_once from one thread (the router's); lookups run on the
// discovery thread, never on the pool's polling thread, so a slow DNS server delays only discovery.
// Must not: touch nodes it did not add (static and registered nodes stay as they are).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "router/node_pool.h"

namespace baton::router {

enum class AddressFamily { kAny, kIpv4, kIpv6 };

// "any", "ipv4", "ipv6"; INVALID_ARGUMENT naming --dns-family otherwise.
absl::StatusOr<AddressFamily> parse_address_family(const std::string& text);

// One name to look up, and the port its nodes serve on.
struct DnsTarget {
  NodeKind kind;
  std::string name;
  int port = 0;
};

// "NAME:PORT" for nodes of `kind`; INVALID_ARGUMENT naming `flag` when it is not one.
absl::StatusOr<DnsTarget> parse_dns_target(NodeKind kind, const std::string& text, const std::string& flag);

// "10.0.0.7:5001", or "[fd00::7]:5001" for an IPv6 literal.
std::string node_address(const std::string& ip, int port);

// The IP literals `name` resolves to (deduplicated, sorted). UNAVAILABLE with getaddrinfo's reason
// (NXDOMAIN, a temporary failure...) and the name.
using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string& name, AddressFamily family)>;
absl::StatusOr<std::vector<std::string>> resolve_with_getaddrinfo(const std::string& name, AddressFamily family);

struct DnsDiscoveryOptions {
  std::vector<DnsTarget> targets;
  std::chrono::milliseconds refresh_interval{5000};
  AddressFamily family = AddressFamily::kAny;
  Resolver resolver = resolve_with_getaddrinfo;
};

class DnsDiscovery {
 public:
  DnsDiscovery(NodePool& pool, DnsDiscoveryOptions options);
  ~DnsDiscovery();
  DnsDiscovery(const DnsDiscovery&) = delete;
  DnsDiscovery& operator=(const DnsDiscovery&) = delete;

  // Starts the thread, which refreshes at once and then every refresh interval. Waits up to
  // `first_round` for the first refresh, so that the first requests find the nodes (a slower DNS
  // only means they are found later).
  void start(std::chrono::milliseconds first_round);
  void stop();
  // One lookup of every name and one reconciliation, on the caller's thread (the thread's loop;
  // tests call it directly without start()).
  void refresh_once();

 private:
  void run();

  NodePool& pool_;
  const DnsDiscoveryOptions options_;
  // Discovery thread only (or the caller of refresh_once without start).
  std::map<std::string, std::set<std::string>> last_known_;    // target "kind|name" -> node addresses
  std::map<std::string, std::string> last_problem_;            // target -> the lookup error last logged
  std::map<NodeKind, std::set<std::string>> added_;            // what this discovery put in the pool

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int rounds_ = 0;
  std::thread thread_;
};

}  // namespace baton::router
