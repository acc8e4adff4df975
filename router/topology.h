// What clients may learn of the cluster behind the router. Unless --expose-topology, the public
// API tells no node address or file path: errors name nodes by kind only ("decode node
// [address hidden]"), a response's usage names no node, and model info's speculative config keeps
// a draft model's directory name without its path and drops the proposer sidecar's address.
// (`baton up` exposes it: a local cluster's user owns every process.)
//
// Must not: touch what operators see (logs, /metrics, the live page, all behind their own keys).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace baton::router {

// `text` with every IPv4 address (with its port, if any), bracketed IPv6 address and each of
// `known` (the nodes' addresses, which may be host names) replaced by "[address hidden]".
std::string redact_addresses(std::string_view text, const std::vector<std::string>& known);

// A speculative config (JSON) without paths or addresses: "model" becomes its last path component,
// "proposer_endpoint" goes. Text that is not a JSON object comes back as it was.
std::string redact_speculative_config(const std::string& json);

}  // namespace baton::router
