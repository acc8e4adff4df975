// A node's NodeInfo (role, model and layout fingerprints, speculative config, load, free KV) from
// its engine, for the router's pairing and choice of nodes. Call it on the engine's loop thread.
//
// Must not: change the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "baton/v1/node.pb.h"
#include "engine/engine.h"

namespace baton {

struct NodeIdentity {
  std::string role;        // "prefill", "decode", "both"
  std::string model_name;  // the model directory's base name
  std::uint64_t instance_id = 0;
  std::string address;
  std::vector<std::string> transports;
};

inline constexpr std::uint32_t kNodeProtocolVersion = 2;  // 2: per-request capabilities

node::v1::NodeInfo make_node_info(const Engine& engine, const NodeIdentity& id, std::int64_t queued_prefill_tokens);

// A random 64-bit instance id (a restarted node gets a new one).
std::uint64_t new_instance_id();

// The base name of a model directory ("models/x/target/" -> "target").
std::string model_name_of(const std::string& model_dir);

}  // namespace baton
