// router/dns_discovery and NodePool's remove / forget: a scripted resolver (the one part replaced:
// DNS answers that change on demand) in front of a real NodePool, reconciled round by round; and
// the real getaddrinfo on localhost.
#include "router/dns_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

namespace baton::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// DNS answers a test changes between rounds: name -> IPs, or an error.
class ScriptedDns {
 public:
  void answer(const std::string& name, std::vector<std::string> ips) {
    std::lock_guard lock(mu_);
    answers_[name] = std::move(ips);
  }
  void fail(const std::string& name, const std::string& why) {
    std::lock_guard lock(mu_);
    answers_[name] = absl::UnavailableError(why);
  }
  Resolver resolver() {
    return [this](const std::string& name, AddressFamily) -> absl::StatusOr<std::vector<std::string>> {
      std::lock_guard lock(mu_);
      auto it = answers_.find(name);
      if (it == answers_.end()) return absl::UnavailableError("NXDOMAIN");
      return it->second;
    };
  }

 private:
  std::mutex mu_;
  std::map<std::string, absl::StatusOr<std::vector<std::string>>> answers_;
};

std::vector<std::string> addresses(const NodePool& pool, NodeKind kind) {
  std::vector<std::string> out;
  for (const NodeStatus& n : pool.status()) {
    if (n.kind == kind) out.push_back(n.address);
  }
  return out;
}

DnsDiscoveryOptions options(ScriptedDns& dns, std::vector<DnsTarget> targets) {
  DnsDiscoveryOptions o;
  o.targets = std::move(targets);
  o.resolver = dns.resolver();
  return o;
}

TEST(DnsTargets, ParseNamePortAndFamilies) {
  auto t = parse_dns_target(NodeKind::kDecode, "baton-decode.ns.svc.cluster.local:50052", "decode-dns");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "baton-decode.ns.svc.cluster.local");
  EXPECT_EQ(t->port, 50052);
  for (const std::string bad : {"baton-decode", ":5", "name:0", "name:x", "name:70000"}) {
    auto b = parse_dns_target(NodeKind::kDecode, bad, "decode-dns");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_THAT(b.status().message(), HasSubstr("--decode-dns"));
  }
  EXPECT_EQ(*parse_address_family("ipv6"), AddressFamily::kIpv6);
  EXPECT_THAT(parse_address_family("v4").status().message(), HasSubstr("--dns-family"));
  EXPECT_EQ(node_address("10.1.2.3", 5001), "10.1.2.3:5001");
  EXPECT_EQ(node_address("fd00::7", 5001), "[fd00::7]:5001");
}

TEST(DnsDiscovery, AddsNewAddressesAndRemovesOnlyThoseItAdded) {
  NodePoolOptions static_node;
  static_node.decode_addresses = {"10.0.0.1:7000"};
  NodePool pool(static_node);
  ScriptedDns dns;
  DnsDiscovery discovery(pool, options(dns, {{NodeKind::kDecode, "d.svc", 7000}, {NodeKind::kPrefill, "p.svc", 7001}}));

  dns.answer("d.svc", {"10.0.0.1", "10.0.0.2"});
  dns.answer("p.svc", {"fd00::5"});
  discovery.refresh_once();
  // 10.0.0.1:7000 is static and discovered: one node.
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), UnorderedElementsAre("10.0.0.1:7000", "10.0.0.2:7000"));
  EXPECT_THAT(addresses(pool, NodeKind::kPrefill), ElementsAre("[fd00::5]:7001"));

  dns.answer("d.svc", {"10.0.0.3"});
  dns.answer("p.svc", {"fd00::5", "fd00::6"});
  discovery.refresh_once();
  // 10.0.0.2 went away; 10.0.0.1 stays because the flag named it too.
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), UnorderedElementsAre("10.0.0.1:7000", "10.0.0.3:7000"));
  EXPECT_THAT(addresses(pool, NodeKind::kPrefill), UnorderedElementsAre("[fd00::5]:7001", "[fd00::6]:7001"));
}

TEST(DnsDiscovery, AFailingLookupKeepsTheLastKnownAddresses) {
  NodePool pool(NodePoolOptions{});
  ScriptedDns dns;
  DnsDiscovery discovery(pool, options(dns, {{NodeKind::kDecode, "d.svc", 7000}}));
  dns.answer("d.svc", {"10.0.0.1", "10.0.0.2"});
  discovery.refresh_once();
  dns.fail("d.svc", "SERVFAIL");
  discovery.refresh_once();
  discovery.refresh_once();
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), UnorderedElementsAre("10.0.0.1:7000", "10.0.0.2:7000"));
  // NXDOMAIN (no pod ready) is a failure too: the nodes stay until DNS names others.
  dns.fail("d.svc", "NXDOMAIN");
  discovery.refresh_once();
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), UnorderedElementsAre("10.0.0.1:7000", "10.0.0.2:7000"));
  dns.answer("d.svc", {"10.0.0.2"});
  discovery.refresh_once();
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), ElementsAre("10.0.0.2:7000"));
}

TEST(DnsDiscovery, TwoNamesWithTheSameAddressMakeOneNode) {
  NodePool pool(NodePoolOptions{});
  ScriptedDns dns;
  DnsDiscovery discovery(pool, options(dns, {{NodeKind::kDecode, "a.svc", 7000}, {NodeKind::kDecode, "b.svc", 7000}}));
  dns.answer("a.svc", {"10.0.0.1"});
  dns.answer("b.svc", {"10.0.0.1", "10.0.0.2"});
  discovery.refresh_once();
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), UnorderedElementsAre("10.0.0.1:7000", "10.0.0.2:7000"));
  dns.answer("b.svc", {"10.0.0.2"});
  discovery.refresh_once();
  // a.svc still names 10.0.0.1.
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), UnorderedElementsAre("10.0.0.1:7000", "10.0.0.2:7000"));
}

TEST(DnsDiscovery, TheThreadRefreshesUntilStopped) {
  NodePool pool(NodePoolOptions{});
  ScriptedDns dns;
  auto o = options(dns, {{NodeKind::kDecode, "d.svc", 7000}});
  o.refresh_interval = std::chrono::milliseconds(20);
  DnsDiscovery discovery(pool, o);
  dns.answer("d.svc", {"10.0.0.1"});
  discovery.start(std::chrono::seconds(10));  // waits for the first round
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), ElementsAre("10.0.0.1:7000"));
  dns.answer("d.svc", {"10.0.0.9"});
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (addresses(pool, NodeKind::kDecode) != std::vector<std::string>{"10.0.0.9:7000"} && Clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), ElementsAre("10.0.0.9:7000"));
  discovery.stop();
}

TEST(Getaddrinfo, ResolvesLocalhostAndNamesAFailingName) {
  auto v4 = resolve_with_getaddrinfo("localhost", AddressFamily::kIpv4);
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_THAT(*v4, ElementsAre("127.0.0.1"));
  auto bad = resolve_with_getaddrinfo("no-such-host.invalid", AddressFamily::kAny);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("no-such-host.invalid"));
}

TEST(NodePool, RemoveTakesOneSourceAtATime) {
  NodePool pool(NodePoolOptions{});
  ASSERT_TRUE(pool.add(NodeKind::kDecode, "10.0.0.1:7000", NodeSource::kRegistration).ok());
  ASSERT_TRUE(pool.add(NodeKind::kDecode, "10.0.0.1:7000", NodeSource::kDns).ok());
  EXPECT_FALSE(pool.remove(NodeKind::kDecode, "10.0.0.1:7000", NodeSource::kDns));
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), ElementsAre("10.0.0.1:7000"));
  EXPECT_TRUE(pool.remove(NodeKind::kDecode, "10.0.0.1:7000", NodeSource::kRegistration));
  EXPECT_TRUE(addresses(pool, NodeKind::kDecode).empty());
  EXPECT_FALSE(pool.remove(NodeKind::kDecode, "10.0.0.1:7000", NodeSource::kRegistration));
}

// Nothing listens on these loopback ports (bound and closed by nobody: port 1 needs root to
// listen), so every Check fails at once with UNAVAILABLE.
TEST(NodePool, ForgetsUnreachableRegisteredAndDiscoveredNodesButNeverStaticOnes) {
  NodePoolOptions o;
  o.decode_addresses = {"127.0.0.1:1"};
  o.node_timeout = std::chrono::milliseconds(2000);
  o.forget_unreachable_after = std::chrono::milliseconds(60000);
  NodePool pool(o);
  ASSERT_TRUE(pool.add(NodeKind::kDecode, "127.0.0.1:2", NodeSource::kRegistration).ok());
  ASSERT_TRUE(pool.add(NodeKind::kPrefill, "127.0.0.1:3", NodeSource::kDns).ok());
  pool.poll_once();
  const auto now = Clock::now();
  EXPECT_TRUE(pool.forget_unreachable(now).empty());  // not for long enough yet
  EXPECT_THAT(pool.forget_unreachable(now + std::chrono::seconds(61)),
              UnorderedElementsAre("decode node 127.0.0.1:2", "prefill node 127.0.0.1:3"));
  EXPECT_THAT(addresses(pool, NodeKind::kDecode), ElementsAre("127.0.0.1:1"));
  EXPECT_TRUE(addresses(pool, NodeKind::kPrefill).empty());
}

}  // namespace
}  // namespace baton::router
