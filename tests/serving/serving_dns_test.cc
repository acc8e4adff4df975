// DNS discovery with the real getaddrinfo: the router is given no node, only
// `--decode-dns localhost:PORT --dns-family ipv4`, finds the decode node at 127.0.0.1:PORT and
// serves a request through it with the local reference's tokens.
#include <gtest/gtest.h>

#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

std::unique_ptr<Subprocess> start_process(std::vector<std::string> argv) {
  Subprocess::Options o;
  o.argv = std::move(argv);
  auto p = Subprocess::start(std::move(o));
  BATON_CHECK(p.ok(), p.status().ToString());
  return std::move(*p);
}

std::string ready_address(Subprocess& p) {
  auto line = p.wait_for_line(" ready on ", std::chrono::seconds(120));
  BATON_CHECK(line.ok(), line.status().ToString());
  const std::string rest = line->substr(line->find(" ready on ") + 10);
  return rest.substr(0, rest.find(' '));
}

TEST(ServingDns, TheRouterFindsADecodeNodeThroughDns) {
  auto d = start_process({binary("baton-decode"), "--model", family_path("target"), "--port", "0", "--threads", "1",
                          "--kv-cache-memory", "0.125"});
  const std::string d_address = ready_address(*d);
  const std::string port = d_address.substr(d_address.rfind(':') + 1);
  ASSERT_EQ(d_address, "127.0.0.1:" + port);
  auto router = start_process({binary("baton-router"), "--model", family_path("target"), "--port", "0",
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

}  // namespace
}  // namespace baton::testing
