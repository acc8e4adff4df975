// router/pairing: which nodes the router uses and which (P, D) pairs it allows, judged from
// NodeInfo messages as nodes report them.
#include "router/pairing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "node_info_builders.h"

namespace baton::router {
namespace {

using ::testing::HasSubstr;
using testing::node_info;

TEST(CheckNode, ProtocolVersionMustBeTwo) {
  auto info = node_info("decode");
  EXPECT_TRUE(check_node(NodeKind::kDecode, "d:1", info).ok());
  info.set_protocol_version(1);  // before per-request capabilities
  const absl::Status s = check_node(NodeKind::kDecode, "d:1", info);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("decode node d:1 speaks protocol_version 1; this router speaks 2"));
  info.set_protocol_version(0);  // a node that never set it
  EXPECT_FALSE(check_node(NodeKind::kDecode, "d:1", info).ok());
}

TEST(CheckNode, ANegativeLoadIsNotTrusted) {
  // A node reporting less than nothing to do would draw every request to itself.
  auto info = node_info("prefill");
  info.mutable_load()->set_num_waiting(-5);
  const absl::Status s = check_node(NodeKind::kPrefill, "p:1", info);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("negative load"));
  info = node_info("decode");
  info.mutable_load()->add_pools()->set_free(-1);
  EXPECT_FALSE(check_node(NodeKind::kDecode, "d:1", info).ok());
}

TEST(CheckNode, RoleMustFitTheList) {
  EXPECT_TRUE(check_node(NodeKind::kPrefill, "p:1", node_info("prefill")).ok());
  EXPECT_TRUE(check_node(NodeKind::kDecode, "d:1", node_info("decode")).ok());
  EXPECT_TRUE(check_node(NodeKind::kDecode, "d:1", node_info("both")).ok());
  EXPECT_THAT(check_node(NodeKind::kPrefill, "p:1", node_info("decode")).message(),
              HasSubstr("prefill node p:1 reports role \"decode\""));
  EXPECT_THAT(check_node(NodeKind::kDecode, "d:1", node_info("prefill")).message(),
              HasSubstr("decode node d:1 reports role \"prefill\""));
}

TEST(CheckPair, SameModelSameLayoutAndTheRule) {
  EXPECT_TRUE(check_pair("p:1", node_info("prefill", "eagle3", 1), "d:1", node_info("decode", "eagle3", 4)).ok());
  EXPECT_TRUE(check_pair("p:1", node_info("prefill"), "d:1", node_info("decode")).ok());
  EXPECT_TRUE(check_pair("p:1", node_info("prefill"), "d:1", node_info("decode", "ngram", 4)).ok());
}

TEST(CheckPair, ModelFingerprintMismatch) {
  auto p = node_info("prefill");
  p.set_model_fingerprint("model-b");
  p.set_model_name("other-model");
  const absl::Status s = check_pair("p:1", p, "d:1", node_info("decode"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("prefill node p:1 and decode node d:1 serve different models"));
  EXPECT_THAT(s.message(), HasSubstr("model-b (other-model) vs model-a (baton-tiny-code)"));
}

TEST(CheckPair, LayoutFingerprintMismatch) {
  auto d = node_info("decode");
  d.set_layout_fingerprint(R"({"block_size":32})");
  const absl::Status s = check_pair("p:1", node_info("prefill"), "d:1", d);
  EXPECT_THAT(s.message(), HasSubstr("lay out KV differently"));
  EXPECT_THAT(s.message(), HasSubstr(R"({"block_size":32})"));
}

TEST(CheckPair, RuleBreaksNameBothNodesValuesModelKindAndRule) {
  const absl::Status s = check_pair("p:1", node_info("prefill", "mtp", 2), "d:1", node_info("decode", "mtp", 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("prefill node p:1 and decode node d:1 cannot be paired"));
  EXPECT_THAT(s.message(), HasSubstr("num_speculative_tokens = 2, but prefill must use 1"));
  EXPECT_THAT(s.message(), HasSubstr("decode node: method mtp, num_speculative_tokens 4"));
  EXPECT_THAT(s.message(), HasSubstr("LlamaForCausalLM"));
  EXPECT_THAT(s.message(), HasSubstr("the P/D rule:"));

  EXPECT_THAT(check_pair("p:1", node_info("prefill"), "d:1", node_info("decode", "eagle3", 4)).message(),
              HasSubstr("needs draft-side state"));
  EXPECT_THAT(check_pair("p:1", node_info("prefill", "eagle3", 1), "d:1", node_info("decode")).message(),
              HasSubstr("the decode node does not"));

  auto hybrid_p = node_info("prefill", "mtp", 1), hybrid_d = node_info("decode", "mtp", 3);
  hybrid_p.set_model_has_recurrent_layers(true);
  hybrid_d.set_model_has_recurrent_layers(true);
  EXPECT_THAT(check_pair("p:1", hybrid_p, "d:1", hybrid_d).message(), HasSubstr("prefill has 1, decode has 3"));
  // Such nodes' layouts differ too (2 state slots vs 4): the refusal names the rule, not the layout.
  hybrid_p.set_layout_fingerprint(R"({"recurrent_state_slots":2})");
  hybrid_d.set_layout_fingerprint(R"({"recurrent_state_slots":4})");
  EXPECT_THAT(check_pair("p:1", hybrid_p, "d:1", hybrid_d).message(), HasSubstr("cannot be paired"));
  hybrid_p.set_layout_fingerprint(hybrid_d.layout_fingerprint());
  hybrid_p.set_num_speculative_tokens(3);
  EXPECT_TRUE(check_pair("p:1", hybrid_p, "d:1", hybrid_d).ok());
}

// The transport: D's first choice that P can send over; a pair with none in common is refused,
// naming both lists (NCCL-only nodes beside UCX/gRPC ones, say).
TEST(CheckPair, TheTransportIsDsFirstChoiceThatPCanSend) {
  auto with_transports = [](baton::node::v1::NodeInfo info, std::vector<std::string> transports) {
    info.clear_transports();
    for (const std::string& t : transports) info.add_transports(t);
    return info;
  };
  auto p = with_transports(node_info("prefill"), {"grpc"});
  auto d = with_transports(node_info("decode"), {"ucx", "grpc"});
  EXPECT_EQ(pair_transport(p, d), "grpc");
  EXPECT_TRUE(check_pair("p:1", p, "d:1", d).ok());
  p.add_transports("ucx");
  EXPECT_EQ(pair_transport(p, d), "ucx");

  const auto nccl = with_transports(node_info("decode"), {"nccl"});
  EXPECT_EQ(pair_transport(p, nccl), "");
  const absl::Status s = check_pair("p:1", p, "d:2", nccl);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("prefill node p:1 and decode node d:2 share no KV transport: P sends over grpc,ucx, "
                                     "D receives over nccl"));
  // A node that does not list its transports leaves the choice to D.
  EXPECT_TRUE(check_pair("p:1", with_transports(node_info("prefill"), {}), "d:2", nccl).ok());
  EXPECT_EQ(pair_transport(with_transports(node_info("prefill"), {}), nccl), "");
}

}  // namespace
}  // namespace baton::router
