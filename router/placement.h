// Where one request runs: which decode node (D) and whether it is prefilled on a prefill node (P)
// or locally on D (conditional disaggregation). A pure function over the usable nodes' latest
// NodeInfo plus what the router itself has sent them since, so tests decide it over NodeInfo
// messages they build.
//
//   D: the most free target-pool KV blocks (Info's free minus the router's reservations since that
//      Info), ties by the least load (running + waiting + the router's requests since that Info).
//   P: among those allowed with D (pairing.h), the least queued prefill tokens (Info's plus the
//      router's prompt tokens sent since that Info), ties by load.
//   Local prefill on D when the request forces it, when the prompt has at most
//   local_prefill_max_tokens tokens, or when no P is usable (unless the local fallback is off:
//   then UNAVAILABLE). Usable Ps of which none may be paired with a usable D are a configuration
//   error, never a silent fallback: FAILED_PRECONDITION with the rule (or the fingerprint).
//
// Must not: call nodes, log or count (the caller logs and counts each fallback).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "baton/v1/node.pb.h"

namespace baton::router {

// A usable node as placement sees it.
struct NodeView {
  std::string address;
  const baton::node::v1::NodeInfo* info = nullptr;  // latest Info; not null
  std::int64_t reserved_blocks = 0;  // D: target-pool blocks the router reserved since that Info
  std::int64_t queued_tokens = 0;    // P: prompt tokens the router sent since that Info
  std::int32_t requests = 0;         // requests the router started on it since that Info
};

// Free target-pool blocks as the router estimates them (never below 0).
std::int64_t estimated_free_blocks(const NodeView& d);
// Target-pool blocks a prompt of `prompt_len` tokens takes on a node with this Info.
std::int64_t blocks_for_prompt(const baton::node::v1::NodeInfo& info, std::int64_t prompt_len);

enum class PrefillSite {
  kPrefillNode,       // disaggregated
  kLocalForced,       // request.force_local_prefill
  kLocalShortPrompt,  // prompt_len <= local_prefill_max_tokens
  kLocalNoPrefill,    // no usable prefill node
};
std::string_view prefill_site_name(PrefillSite site);

struct PlacementRequest {
  std::int64_t prompt_len = 0;
  bool force_local_prefill = false;
  std::int64_t local_prefill_max_tokens = 0;
  bool local_fallback = true;  // may prefill on D when no P can be used
};

struct Placement {
  int decode = -1;   // index into `decodes`
  int prefill = -1;  // index into `prefills`; -1 for local prefill
  PrefillSite site = PrefillSite::kPrefillNode;
};

// UNAVAILABLE when `decodes` is empty (the caller adds which nodes are configured and why each is
// not usable); see the header comment for the other errors.
absl::StatusOr<Placement> place(std::span<const NodeView> decodes, std::span<const NodeView> prefills,
                                const PlacementRequest& request);

}  // namespace baton::router
