// NodeInfo messages as nodes report them, for the router's tests: a tiny Llama served with a given
// speculative method and k, a KV pool with some free blocks and some load.
#pragma once

#include <cstdint>
#include <string>

#include "baton/v1/node.pb.h"

namespace baton::router::testing {

inline baton::node::v1::NodeInfo node_info(const std::string& role, const std::string& method = "", int k = 0) {
  baton::node::v1::NodeInfo info;
  info.set_protocol_version(2);
  info.set_role(role);
  info.set_model_name("baton-tiny-code");
  info.set_model_kind("LlamaForCausalLM");
  info.set_model_fingerprint("model-a");
  info.set_layout_fingerprint(R"({"block_size":16,"dtype":"bf16","layers":8})");
  info.set_speculative_method(method);
  info.set_num_speculative_tokens(k);
  if (!method.empty()) {
    info.set_speculative_config(R"({"method":")" + method + R"(","num_speculative_tokens":)" + std::to_string(k) + "}");
  }
  info.set_vocab_size(4096);
  info.set_max_model_len(2048);
  info.set_block_size(16);
  info.add_transports("grpc");
  info.set_instance_id(42);
  return info;
}

// Sets the target pool's free blocks and the load.
inline baton::node::v1::NodeInfo with_load(baton::node::v1::NodeInfo info, std::int32_t free_blocks,
                                           std::int32_t running = 0, std::int32_t waiting = 0,
                                           std::int64_t queued_prefill_tokens = 0) {
  auto* load = info.mutable_load();
  load->set_num_running(running);
  load->set_num_waiting(waiting);
  load->set_queued_prefill_tokens(queued_prefill_tokens);
  load->clear_pools();
  auto* pool = load->add_pools();
  pool->set_name("target");
  pool->set_num_blocks(1024);
  pool->set_free(free_blocks);
  pool->set_used(1024 - free_blocks);
  return info;
}

}  // namespace baton::router::testing
