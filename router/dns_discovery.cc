#include "router/dns_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include "absl/strings/numbers.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton::router {

namespace {

const char* kind_name(NodeKind kind) { return kind == NodeKind::kPrefill ? "prefill" : "decode"; }

std::string target_key(const DnsTarget& t) { return str_cat(kind_name(t.kind), "|", t.name, ":", t.port); }

std::string join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += str_cat(out.empty() ? "" : ", ", i);
  return out.empty() ? "none" : out;
}

}  // namespace

absl::StatusOr<AddressFamily> parse_address_family(const std::string& text) {
  if (text == "any") return AddressFamily::kAny;
  if (text == "ipv4") return AddressFamily::kIpv4;
  if (text == "ipv6") return AddressFamily::kIpv6;
  return absl::InvalidArgumentError(str_cat("--dns-family must be any, ipv4 or ipv6, got '", text, "'"));
}

absl::StatusOr<DnsTarget> parse_dns_target(NodeKind kind, const std::string& text, const std::string& flag) {
  const std::size_t colon = text.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(text.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        str_cat("--", flag, ": '", text, "' is not NAME:PORT (e.g. baton-decode.baton.svc.cluster.local:50052)"));
  }
  return DnsTarget{kind, text.substr(0, colon), port};
}

std::string node_address(const std::string& ip, int port) {
  if (ip.find(':') != std::string::npos) return str_cat("[", ip, "]:", port);
  return str_cat(ip, ":", port);
}

absl::StatusOr<std::vector<std::string>> resolve_with_getaddrinfo(const std::string& name, AddressFamily family) {
  addrinfo hints{};
  hints.ai_family = family == AddressFamily::kIpv4 ? AF_INET : family == AddressFamily::kIpv6 ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    std::string why = gai_strerror(rc);
    if (rc == EAI_NONAME) why += " (NXDOMAIN: no such name, or no ready pod behind the Service)";
    if (rc == EAI_AGAIN) why += " (SERVFAIL or a timeout: the DNS server did not answer)";
    return absl::UnavailableError(str_cat("looking up '", name, "': ", why));
  }
  std::set<std::string> ips;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof buf);
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, buf, sizeof buf);
    } else {
      continue;
    }
    ips.insert(buf);
  }
  freeaddrinfo(result);
  return std::vector<std::string>(ips.begin(), ips.end());
}

DnsDiscovery::DnsDiscovery(NodePool& pool, DnsDiscoveryOptions options) : pool_(pool), options_(std::move(options)) {}

DnsDiscovery::~DnsDiscovery() { stop(); }

void DnsDiscovery::start(std::chrono::milliseconds first_round) {
  std::unique_lock lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { run(); });
  if (!cv_.wait_for(lock, first_round, [this] { return rounds_ > 0; })) {
    spdlog::warn("router: the first DNS lookup did not finish within {} ms; nodes it finds are added when it does",
                 first_round.count());
  }
}

void DnsDiscovery::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // A lookup in progress cannot be interrupted; the join waits for it (bounded by the resolver's
  // own timeout, resolv.conf's "timeout" x "attempts").
  if (thread_.joinable()) thread_.join();
}

void DnsDiscovery::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    refresh_once();
    lock.lock();
    ++rounds_;
    cv_.notify_all();
    cv_.wait_for(lock, options_.refresh_interval, [this] { return stopping_; });
  }
}

void DnsDiscovery::refresh_once() {
  std::map<NodeKind, std::set<std::string>> wanted;
  for (const DnsTarget& t : options_.targets) {
    const std::string key = target_key(t);
    absl::StatusOr<std::vector<std::string>> ips = options_.resolver(t.name, options_.family);
    if (!ips.ok()) {
      const std::string problem(ips.status().message());
      if (last_problem_[key] != problem) {
        spdlog::warn("router: DNS lookup of {} nodes at {}:{} failed: {}; keeping the {} known addresses ({})",
                     kind_name(t.kind), t.name, t.port, problem, last_known_[key].size(), join(last_known_[key]));
      }
      last_problem_[key] = problem;
    } else {
      std::set<std::string> now;
      for (const std::string& ip : *ips) now.insert(node_address(ip, t.port));
      if (!last_problem_[key].empty()) spdlog::info("router: DNS lookup of {}:{} answers again", t.name, t.port);
      last_problem_[key].clear();
      if (now != last_known_[key]) {
        spdlog::info("router: {}:{} resolves to {} {} node(s): {}", t.name, t.port, now.size(), kind_name(t.kind),
                     join(now));
      }
      last_known_[key] = std::move(now);
    }
    wanted[t.kind].insert(last_known_[key].begin(), last_known_[key].end());
  }
  for (NodeKind kind : {NodeKind::kPrefill, NodeKind::kDecode}) {
    const std::set<std::string>& want = wanted[kind];
    std::set<std::string>& have = added_[kind];
    bool added_any = false;
    // Every round, so that a node the pool forgot (unreachable too long) comes back while DNS
    // still lists it; add() is idempotent.
    for (const std::string& a : want) {
      if (absl::Status s = pool_.add(kind, a, NodeSource::kDns); !s.ok()) {
        spdlog::warn("router: cannot add {} node {} from DNS: {}", kind_name(kind), a, std::string(s.message()));
        continue;
      }
      added_any |= have.insert(a).second;
    }
    for (auto it = have.begin(); it != have.end();) {
      if (want.contains(*it)) {
        ++it;
        continue;
      }
      (void)pool_.remove(kind, *it, NodeSource::kDns);
      it = have.erase(it);
    }
    if (added_any) pool_.poll_soon();
  }
}

}  // namespace baton::router
