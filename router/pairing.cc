#include "router/pairing.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "common/pd_rule.h"
#include "common/status.h"

namespace baton::router {

using baton::node::v1::NodeInfo;

std::string node_label(NodeKind kind, const std::string& address) {
  return str_cat(kind == NodeKind::kPrefill ? "prefill" : "decode", " node ", address);
}

absl::Status check_node(NodeKind kind, const std::string& address, const NodeInfo& info) {
  if (info.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(str_cat(node_label(kind, address), " speaks protocol_version ",
                                                 info.protocol_version(), "; this router speaks ", kProtocolVersion,
                                                 " (run a router and nodes from the same release)"));
  }
  const std::string& role = info.role();
  const bool fits = kind == NodeKind::kPrefill ? role == "prefill" : (role == "decode" || role == "both");
  if (!fits) {
    return absl::FailedPreconditionError(str_cat(
        node_label(kind, address), " reports role \"", role, "\"; the router was told it is a ",
        kind == NodeKind::kPrefill ? "prefill node (--prefill or role \"prefill\")"
                                   : "decode node (--decode or role \"decode\"/\"both\")"));
  }
  // Placement prefers the least loaded: a node claiming less than nothing would draw every request.
  const auto& load = info.load();
  bool negative = load.num_waiting() < 0 || load.num_running() < 0 || load.queued_prefill_tokens() < 0;
  for (const auto& pool : load.pools()) {
    negative |= pool.num_blocks() < 0 || pool.used() < 0 || pool.free() < 0 || pool.reserved() < 0;
  }
  if (negative) {
    return absl::FailedPreconditionError(
        str_cat(node_label(kind, address), " reports a negative load (", load.ShortDebugString(), "): not trusted"));
  }
  return absl::OkStatus();
}

std::string pair_transport(const NodeInfo& prefill, const NodeInfo& decode) {
  for (const std::string& t : decode.transports()) {
    if (std::find(prefill.transports().begin(), prefill.transports().end(), t) != prefill.transports().end()) return t;
  }
  return "";
}

absl::Status check_pair(const std::string& prefill_address, const NodeInfo& prefill, const std::string& decode_address,
                        const NodeInfo& decode) {
  const std::string both = str_cat(node_label(NodeKind::kPrefill, prefill_address), " and ",
                                   node_label(NodeKind::kDecode, decode_address));
  if (prefill.model_fingerprint() != decode.model_fingerprint()) {
    return absl::FailedPreconditionError(str_cat(both, " serve different models: model_fingerprint ",
                                                 prefill.model_fingerprint(), " (", prefill.model_name(), ") vs ",
                                                 decode.model_fingerprint(), " (", decode.model_name(), ")"));
  }
  // The P/D rule before the layouts: a pair that breaks it lays KV or state out differently too
  // (a draft pool, a hybrid's 1 + k state slots), and the rule is what the operator must fix.
  const PdModel model{decode.model_kind(), decode.model_has_recurrent_layers() || prefill.model_has_recurrent_layers()};
  const SpeculationSetting p{prefill.speculative_method(), prefill.num_speculative_tokens()};
  const SpeculationSetting d{decode.speculative_method(), decode.num_speculative_tokens()};
  if (absl::Status s = check_pd_pairing(p, d, model); !s.ok()) {
    return absl::FailedPreconditionError(str_cat(both, " cannot be paired: ", s.message()));
  }
  if (prefill.layout_fingerprint() != decode.layout_fingerprint()) {
    return absl::FailedPreconditionError(
        str_cat(both, " lay out KV differently (dtype, block size, layers, heads or draft layers), so P cannot write "
                      "into D's blocks: layout_fingerprint ",
                prefill.layout_fingerprint(), " vs ", decode.layout_fingerprint()));
  }
  if (!prefill.transports().empty() && !decode.transports().empty() && pair_transport(prefill, decode).empty()) {
    return absl::FailedPreconditionError(str_cat(both, " share no KV transport: P sends over ",
                                                 absl::StrJoin(prefill.transports(), ","), ", D receives over ",
                                                 absl::StrJoin(decode.transports(), ",")));
  }
  return absl::OkStatus();
}

}  // namespace baton::router
