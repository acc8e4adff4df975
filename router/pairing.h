// Whether the router may use a node, and whether it may pair a prefill node (P) with a decode node
// (D), judged from the NodeInfo each reports. Pure functions over messages, so tests build the
// NodeInfo they need.
//
// A node is usable when it speaks protocol_version 1 and its role fits the list it is in (a
// prefill node reports "prefill"; a decode node "decode" or "both"). A pair is allowed when both
// serve the same model (model_fingerprint), lay out KV the same way (layout_fingerprint), share a
// KV transport (D accepts one that P can send over) and their speculative configurations keep the
// P/D rule (common/pd_rule.h).
//
// Must not: call nodes, log, or keep state (node_pool.h does, and logs each change once).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "baton/v1/node.pb.h"

namespace baton::router {

inline constexpr unsigned kProtocolVersion = 2;  // 2: per-request capabilities (node.proto)

enum class NodeKind { kPrefill, kDecode };

// "prefill node 10.0.0.1:5001" / "decode node ...": how messages name a node.
std::string node_label(NodeKind kind, const std::string& address);

// OK, or FAILED_PRECONDITION saying why the router will not use this node: another protocol
// version, a role that does not fit, or a load it cannot have (a negative count).
absl::Status check_node(NodeKind kind, const std::string& address, const baton::node::v1::NodeInfo& info);

// The KV transport a request from P to D uses: the first of D's (its preference order) that P can
// send over; "" when they share none, or a node does not say (D then picks its preferred one).
std::string pair_transport(const baton::node::v1::NodeInfo& prefill, const baton::node::v1::NodeInfo& decode);

// OK, or FAILED_PRECONDITION naming both nodes, both values, the model kind and the rule.
absl::Status check_pair(const std::string& prefill_address, const baton::node::v1::NodeInfo& prefill,
                        const std::string& decode_address, const baton::node::v1::NodeInfo& decode);

}  // namespace baton::router
