// Fuzzes the speculative_config parser, engine/spec/config.h: SpeculativeConfig::parse(json, role,
// recurrent) for every NodeRole, with and without recurrent layers — the JSON of the
// --speculative-config flag and of the proposer sidecar's hello (proposer_session.cc).
//
// Input: the JSON text, as given.
//
// Checks: parse returns (never throws or crashes) for every role; what parses serializes
// (to_json().dump()), satisfies the P/D rule for its role, and — when k is known — round-trips:
// parse(to_json().dump(), kColocated) accepts it and gives the same to_json(), which is what a
// decode node relies on when it sends its config to the proposer sidecar. pd_compatible runs on
// every pair of configs that parsed.
//
// Must not: load a model or start a proposer, or skip an input by its content.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/spec/config.h"
#include "fuzz/fuzz_support.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool recurrent : {false, true}) {
    std::optional<baton::SpeculativeConfig> prefill, decode;
    for (baton::NodeRole role : {baton::NodeRole::kColocated, baton::NodeRole::kPrefill, baton::NodeRole::kDecode}) {
      auto parsed = baton::SpeculativeConfig::parse(text, role, recurrent);
      if (!parsed.ok()) continue;
      const baton::SpeculativeConfig& c = *parsed;
      FUZZ_CHECK(!baton::spec_method_name(c.method).empty());
      FUZZ_CHECK(baton::node_role_name(role) != "?");
      const nlohmann::json j = c.to_json();
      const std::string dumped = j.dump();
      if (c.num_speculative_tokens >= 0) {
        FUZZ_CHECK(baton::validate_for_role(c, role, recurrent).ok());
        auto again = baton::SpeculativeConfig::parse(dumped, baton::NodeRole::kColocated, recurrent);
        FUZZ_CHECK(again.ok());
        FUZZ_CHECK(again->to_json() == j);
      }
      if (role == baton::NodeRole::kPrefill) prefill = c;
      if (role == baton::NodeRole::kDecode) decode = c;
    }
    if (prefill && decode) (void)baton::pd_compatible(*prefill, *decode, recurrent);
  }
  return 0;
}
