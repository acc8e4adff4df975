#include "router/placement.h"

#include <algorithm>
#include <vector>

#include "common/status.h"
#include "router/pairing.h"

namespace baton::router {
namespace {

using baton::node::v1::NodeInfo;

std::int64_t load_of(const NodeView& n) {
  return static_cast<std::int64_t>(n.info->load().num_running()) + n.info->load().num_waiting() + n.requests;
}

// True when d is a better decode node than best.
bool better_decode(const NodeView& d, const NodeView& best) {
  const std::int64_t a = estimated_free_blocks(d), b = estimated_free_blocks(best);
  if (a != b) return a > b;
  return load_of(d) < load_of(best);
}

std::int64_t queued_of(const NodeView& p) { return p.info->load().queued_prefill_tokens() + p.queued_tokens; }

bool better_prefill(const NodeView& p, const NodeView& best) {
  const std::int64_t a = queued_of(p), b = queued_of(best);
  if (a != b) return a < b;
  return load_of(p) < load_of(best);
}

}  // namespace

std::int64_t estimated_free_blocks(const NodeView& d) {
  const auto& pools = d.info->load().pools();
  std::int64_t free = 0;
  const auto target = std::find_if(pools.begin(), pools.end(), [](const auto& p) { return p.name() == "target"; });
  if (target != pools.end()) free = target->free();
  else if (!pools.empty()) free = pools.begin()->free();
  return std::max<std::int64_t>(0, free - d.reserved_blocks);
}

std::int64_t blocks_for_prompt(const NodeInfo& info, std::int64_t prompt_len) {
  const std::int64_t block_size = info.block_size() > 0 ? info.block_size() : 16;
  return (prompt_len + block_size - 1) / block_size;
}

std::string_view prefill_site_name(PrefillSite site) {
  switch (site) {
    case PrefillSite::kPrefillNode: return "prefill node";
    case PrefillSite::kLocalForced: return "local (forced by the request)";
    case PrefillSite::kLocalShortPrompt: return "local (short prompt)";
    case PrefillSite::kLocalNoPrefill: return "local (no usable prefill node)";
  }
  return "?";
}

absl::StatusOr<Placement> place(std::span<const NodeView> decodes, std::span<const NodeView> prefills,
                                const PlacementRequest& request) {
  if (decodes.empty()) return absl::UnavailableError("no usable decode node");
  auto best_decode_among = [&](const std::vector<int>& candidates) {
    int best = candidates.front();
    for (int i : candidates) {
      if (better_decode(decodes[i], decodes[best])) best = i;
    }
    return best;
  };
  std::vector<int> all(decodes.size());
  for (std::size_t i = 0; i < decodes.size(); ++i) all[i] = static_cast<int>(i);

  Placement out;
  const bool short_prompt = request.prompt_len <= request.local_prefill_max_tokens;
  if (request.force_local_prefill || short_prompt) {
    out.decode = best_decode_among(all);
    out.site = request.force_local_prefill ? PrefillSite::kLocalForced : PrefillSite::kLocalShortPrompt;
    return out;
  }
  if (prefills.empty()) {
    if (!request.local_fallback) {
      return absl::UnavailableError("no usable prefill node, and local prefill on the decode node is turned off");
    }
    out.decode = best_decode_among(all);
    out.site = PrefillSite::kLocalNoPrefill;
    return out;
  }
  // allowed[d] = the prefill nodes that may be paired with decode node d.
  std::vector<std::vector<int>> allowed(decodes.size());
  std::vector<int> pairable;
  std::string first_refusal;
  for (std::size_t d = 0; d < decodes.size(); ++d) {
    for (std::size_t p = 0; p < prefills.size(); ++p) {
      absl::Status s = check_pair(prefills[p].address, *prefills[p].info, decodes[d].address, *decodes[d].info);
      if (s.ok()) {
        allowed[d].push_back(static_cast<int>(p));
      } else if (first_refusal.empty()) {
        first_refusal = std::string(s.message());
      }
    }
    if (!allowed[d].empty()) pairable.push_back(static_cast<int>(d));
  }
  if (pairable.empty()) return absl::FailedPreconditionError(first_refusal);
  out.decode = best_decode_among(pairable);
  int best = allowed[out.decode].front();
  for (int p : allowed[out.decode]) {
    if (better_prefill(prefills[p], prefills[best])) best = p;
  }
  out.prefill = best;
  out.site = PrefillSite::kPrefillNode;
  return out;
}

}  // namespace baton::router
