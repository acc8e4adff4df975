// router/topology: what a client is told of the cluster without --expose-topology: no node
// address (IPv4, bracketed IPv6, or the known host names) and no file path.
#include "router/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace baton::router {
namespace {

TEST(Topology, AddressesAreHidden) {
  EXPECT_EQ(redact_addresses("decode node 10.0.0.2:5001: no free KV blocks", {}),
            "decode node [address hidden]: no free KV blocks");
  EXPECT_EQ(redact_addresses("prefill node [fd00::1:2]:7000 and 127.0.0.1 failed", {}),
            "prefill node [address hidden] and [address hidden] failed");
  EXPECT_EQ(redact_addresses("decode node baton-decode-0.ns.svc:50052: gone", {"baton-decode-0.ns.svc:50052"}),
            "decode node [address hidden]: gone");
  // Numbers that are not addresses stay.
  EXPECT_EQ(redact_addresses("prompt of 1.5 KB, version 1.2.3, 4096 tokens, [a]", {}),
            "prompt of 1.5 KB, version 1.2.3, 4096 tokens, [a]");
  EXPECT_EQ(redact_addresses("1.2.3.4.5", {}), "1.2.3.4.5");
}

TEST(Topology, SpeculativeConfigsKeepNoPathOrAddress) {
  const std::string redacted = redact_speculative_config(
      R"({"method":"eagle3","model":"/srv/models/secret/eagle3/","num_speculative_tokens":4,)"
      R"("proposer_endpoint":"10.0.0.9:50070"})");
  EXPECT_THAT(redacted, ::testing::HasSubstr(R"("model":"eagle3")"));
  EXPECT_THAT(redacted, ::testing::Not(::testing::HasSubstr("/srv")));
  EXPECT_THAT(redacted, ::testing::Not(::testing::HasSubstr("proposer_endpoint")));
  EXPECT_THAT(redacted, ::testing::HasSubstr(R"("num_speculative_tokens":4)"));
  EXPECT_EQ(redact_speculative_config(""), "");
  EXPECT_EQ(redact_speculative_config("not json"), "not json");
}

}  // namespace
}  // namespace baton::router
