// Nodes the router finds or forgets by itself, with real processes: DNS discovery with the real
// getaddrinfo (the router is given no node, only `--decode-dns localhost:PORT --dns-family ipv4`,
// finds the decode node at 127.0.0.1:PORT and serves a request through it with the local
// reference's tokens), and a registered node that goes away forgotten after
// --forget-unreachable-ms while a node from --decode stays.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

TEST(ServingDns, TheRouterFindsADecodeNodeThroughDns) {
  auto d = start_process({binary("baton-decode"), "--insecure", "--model", family_path("target"), "--port", "0", "--threads", "1",
                          "--kv-cache-memory", "0.125"});
  const std::string d_address = ready_address(*d);
  const std::string port = d_address.substr(d_address.rfind(':') + 1);
  ASSERT_EQ(d_address, "127.0.0.1:" + port);
  auto router = start_process({binary("baton-router"), "--insecure", "--expose-topology", "--model", family_path("target"), "--port", "0",
                               "--decode-dns", "localhost:" + port, "--dns-family", "ipv4", "--dns-refresh-ms", "200"});
  const std::string router_address = ready_address(*router);
  ASSERT_TRUE(router->wait_for_line("localhost:" + port + " resolves to 1 decode node(s): " + d_address,
                                    std::chrono::seconds(30)).ok());
  ASSERT_TRUE(router->wait_for_line("decode node " + d_address + " is usable", std::chrono::seconds(30)).ok());

  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 24;
  const std::string prompt = code_prompts()[2];
  const std::vector<LocalResult> expected = run_local(std::nullopt, {prompt}, {params});
  const Completion c = generate(*router_stub(router_address), text_request(prompt, params));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, expected[0].ids);
  EXPECT_EQ(c.usage.decode_node(), d_address);
}

TEST(ServingDiscovery, AVanishedRegisteredNodeIsForgottenAndAStaticOneIsNot) {
  const std::vector<std::string> node = {binary("baton-decode"), "--insecure", "--model", family_path("target"), "--port", "0",
                                         "--threads", "1", "--kv-cache-memory", "0.125"};
  auto fixed = start_process(node);
  const std::string fixed_address = ready_address(*fixed);
  auto router = start_process({binary("baton-router"), "--insecure", "--expose-topology", "--port", "0", "--decode", fixed_address,
                               "--forget-unreachable-ms", "500", "--poll-interval-ms", "100", "--internal-port", "0"});
  (void)ready_address(*router);
  std::vector<std::string> registering = node;
  registering.insert(registering.end(), {"--register-with", registry_address(*router)});
  auto joined = start_process(registering);
  const std::string joined_address = ready_address(*joined);
  ASSERT_TRUE(router->wait_for_line("decode node " + joined_address + " is usable", std::chrono::seconds(30)).ok());

  // The static node goes first, so it has been unreachable at least as long as the other when
  // that one is forgotten: were it eligible, the same sweep would have forgotten it too.
  fixed->kill();
  ASSERT_TRUE(router->wait_for_line("decode node " + fixed_address + " is not usable", std::chrono::seconds(30)).ok());
  joined->kill();
  ASSERT_TRUE(router->wait_for_line("forgot decode node " + joined_address, std::chrono::seconds(30)).ok());
  EXPECT_FALSE(router->wait_for_line("forgot decode node " + fixed_address, std::chrono::milliseconds(1)).ok());
  // Still polled: it is back once it serves on its address again.
  const std::string port = fixed_address.substr(fixed_address.rfind(':') + 1);
  std::vector<std::string> again = node;
  again[std::find(again.begin(), again.end(), "--port") - again.begin() + 1] = port;
  auto restarted = start_process(again);
  ASSERT_EQ(ready_address(*restarted), fixed_address);
  ASSERT_TRUE(router->wait_for_line("decode node " + fixed_address + " restarted", std::chrono::seconds(30)).ok());
}

}  // namespace
}  // namespace baton::testing
