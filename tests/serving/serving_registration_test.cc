// Nodes that join a running router by registration (--register-with) instead of its flags: the
// router polls them like configured ones, pairs them, and serves requests through them; also in
// the Kubernetes shape, listening on every interface and advertising one address.
#include <gtest/gtest.h>

#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

TEST(ServingRegistration, NodesThatRegisterServeRequests) {
  auto router = start_process(
      {binary("baton-router"), "--insecure", "--expose-topology", "--model", family_path("target"), "--port", "0", "--internal-port", "0"});
  const std::string router_address = ready_address(*router);
  const std::string registry = registry_address(*router);
  const std::vector<std::string> common = {"--model", family_path("target"), "--port", "0", "--threads", "1",
                                           "--kv-cache-memory", "0.125", "--register-with", registry};
  std::vector<std::string> d_argv = {binary("baton-decode"), "--insecure"}, p_argv = {binary("baton-prefill"), "--insecure"};
  d_argv.insert(d_argv.end(), common.begin(), common.end());
  p_argv.insert(p_argv.end(), common.begin(), common.end());
  auto d = start_process(d_argv);
  auto p = start_process(p_argv);
  const std::string d_address = ready_address(*d), p_address = ready_address(*p);
  ASSERT_TRUE(router->wait_for_line("decode node " + d_address + " is usable", std::chrono::seconds(30)).ok());
  ASSERT_TRUE(router->wait_for_line("prefill node " + p_address + " is usable", std::chrono::seconds(30)).ok());

  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 16;
  const std::string prompt = code_prompts()[1];
  const std::vector<LocalResult> expected = run_local(std::nullopt, {prompt}, {params});
  const Completion c = generate(*router_stub(router_address), text_request(prompt, params));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, expected[0].ids);
  EXPECT_FALSE(c.usage.local_prefill());
  EXPECT_EQ(c.usage.prefill_node(), p_address);
  EXPECT_EQ(c.usage.decode_node(), d_address);
}

// What the Helm chart runs: nodes listen on 0.0.0.0 and advertise the pod IP (--advertise-host),
// which is the address they register, report and are served under.
TEST(ServingRegistration, NodesListeningOnEveryInterfaceAdvertiseTheirAddress) {
  auto router = start_process(
      {binary("baton-router"), "--insecure", "--expose-topology", "--model", family_path("target"), "--port", "0", "--internal-port", "0"});
  const std::string router_address = ready_address(*router);
  const std::string registry = registry_address(*router);
  const std::vector<std::string> common = {"--model", family_path("target"), "--port", "0", "--threads", "1",
                                           "--kv-cache-memory", "0.125", "--host", "0.0.0.0",
                                           "--advertise-host", "127.0.0.1", "--register-with", registry};
  std::vector<std::string> d_argv = {binary("baton-decode"), "--insecure"}, p_argv = {binary("baton-prefill"), "--insecure"};
  d_argv.insert(d_argv.end(), common.begin(), common.end());
  p_argv.insert(p_argv.end(), common.begin(), common.end());
  auto d = start_process(d_argv);
  auto p = start_process(p_argv);
  const std::string d_address = ready_address(*d), p_address = ready_address(*p);
  ASSERT_EQ(d_address.rfind("127.0.0.1:", 0), 0u) << d_address;
  ASSERT_EQ(p_address.rfind("127.0.0.1:", 0), 0u) << p_address;
  ASSERT_TRUE(router->wait_for_line("decode node " + d_address + " is usable", std::chrono::seconds(30)).ok());
  ASSERT_TRUE(router->wait_for_line("prefill node " + p_address + " is usable", std::chrono::seconds(30)).ok());

  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 16;
  const std::string prompt = code_prompts()[2];
  const std::vector<LocalResult> expected = run_local(std::nullopt, {prompt}, {params});
  const Completion c = generate(*router_stub(router_address), text_request(prompt, params));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, expected[0].ids);
  EXPECT_EQ(c.usage.prefill_node(), p_address);
  EXPECT_EQ(c.usage.decode_node(), d_address);
}

}  // namespace
}  // namespace baton::testing
