#include "node_common/node_info.h"

#include <filesystem>
#include <random>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton {

node::v1::NodeInfo make_node_info(const Engine& engine, const NodeIdentity& id, std::int64_t queued_prefill_tokens) {
  node::v1::NodeInfo info;
  info.set_protocol_version(kNodeProtocolVersion);
  info.set_role(id.role);
  info.set_model_name(id.model_name);
  const KvLayoutFingerprint fp = engine.layout_fingerprint();
  const KvPoolFingerprint& target = fp.pools.front();
  info.set_model_kind(target.model_kind);
  info.set_model_fingerprint(str_cat(std::hex, target.model_identity, "/", target.weight_dtype));
  info.set_layout_fingerprint(fp.serialize());
  if (const SpeculativeConfig* spec = engine.speculative_config()) {
    info.set_speculative_config(spec->to_json().dump());
    info.set_speculative_method(std::string(spec_method_name(spec->method)));
    info.set_num_speculative_tokens(spec->num_speculative_tokens);
    info.set_verification(std::string(spec->verification_name()));
  }
  info.set_model_has_recurrent_layers(engine.model_config().has_recurrent_layers);
  info.set_vocab_size(engine.model_config().vocab_size);
  info.set_max_model_len(engine.max_model_len());
  info.set_block_size(target.layout.block_size);
  for (const std::string& t : id.transports) info.add_transports(t);
  info.set_instance_id(id.instance_id);
  info.set_address(id.address);
  info.set_device(device_name(engine.backend().device()));
  info.set_backend(engine.describe());
  info.set_kv_host_mirrors(engine.kv_host_mirrored());
  info.set_graph_max_batch_size(engine.graph_max_batch_size());
  info.set_max_num_seqs(engine.max_num_seqs());
  node::v1::NodeLoad* load = info.mutable_load();
  load->set_num_waiting(static_cast<std::int32_t>(engine.num_waiting()));
  load->set_num_running(static_cast<std::int32_t>(engine.num_running()));
  load->set_queued_prefill_tokens(queued_prefill_tokens);
  for (const KvPoolInfo& p : engine.kv_pools()) {
    node::v1::KvPoolUsage* u = load->add_pools();
    u->set_name(p.name);
    u->set_num_blocks(p.num_blocks);
    u->set_used(p.used);
    u->set_free(p.free);
    u->set_reserved(p.reserved);
    u->set_quarantined(p.quarantined);
  }
  const EngineStats& stats = engine.stats();
  node::v1::NodeCounters* c = load->mutable_counters();
  c->set_prompt_tokens(stats.prompt_tokens_computed);
  c->set_generation_tokens(stats.output_tokens);
  c->set_preemptions(stats.preemptions);
  c->set_lease_expiries(stats.lease_expiries);
  c->set_write_quarantines(stats.write_quarantines);
  c->set_write_quarantines_expired(stats.write_quarantines_expired);
  c->set_request_faults(stats.request_faults);
  c->set_prefix_cache_queries(stats.prefix_cache_queries);
  c->set_prefix_cache_hits(stats.prefix_cache_hits);
  c->set_graph_replays(engine.graph_stats().replays);
  if (const SpecDecodeStats* spec = engine.spec_stats()) {
    node::v1::SpecDecodeCounters* s = c->mutable_spec();
    s->set_num_drafts(spec->num_drafts);
    s->set_num_draft_tokens(spec->num_draft_tokens);
    s->set_num_accepted_tokens(spec->num_accepted_tokens);
    for (std::int64_t n : spec->accepted_per_position) s->add_accepted_per_position(n);
    for (std::int64_t n : spec->proposals_by_length) s->add_proposals_by_length(n);
  }
  return info;
}

std::uint64_t new_instance_id() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::string model_name_of(const std::string& model_dir) {
  std::filesystem::path p(model_dir);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace baton
