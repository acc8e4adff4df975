// Per-request capabilities (node.proto, "Capabilities"): a random 128-bit token minted for one
// request, which a peer must present to write that request's KV, commit it, or release, abort or
// stream it. Holding a cluster certificate gets a process to the node's port; only the token gets
// it to a request.
// Must not: log tokens.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace baton::security {

// 32 hex digits from the operating system's entropy.
std::string new_capability();

// Whether `presented` is `expected`, compared in constant time for a given length. False when
// `expected` is empty: a request without a token admits nobody.
bool capability_matches(std::string_view expected, std::string_view presented);

// OK, or PERMISSION_DENIED saying that `what` of request `request_id` needs the request's token
// (naming neither token).
absl::Status check_capability(std::string_view expected, std::string_view presented, std::string_view what,
                              std::string_view request_id);

}  // namespace baton::security
