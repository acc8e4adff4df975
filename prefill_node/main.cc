// baton-prefill: a prefill node. Loads the model, validates the P/D rule for the prefill role
// (num_speculative_tokens = 1), serves baton.node.v1.PrefillNode until SIGINT/SIGTERM. Built a
// second time, with the tests only, as baton-prefill-testing (BATON_TESTING_HOOKS): that one alone
// takes --testing-hold-kv-transfer.
#include "metrics/kv_transfer_metrics.h"
#include "metrics/node_collector.h"
#include "node_common/engine_flags.h"
#include "node_common/kv_transports.h"
#include "node_common/node_command.h"
#include "node_common/node_main.h"
#include "prefill_node/kv_senders.h"
#include "prefill_node/prefill_service.h"
#include "prefill_node/prefill_state_metrics.h"
#include "kv_transfer/ucx_net_devices.h"
#include "proto/grpc_exit.h"
#include "spdlog/spdlog.h"

static int run_prefill_node(int argc, char** argv) {
  using namespace baton;
  block_termination_signals();
  NodeCommand command(
      "baton-prefill",
      "--model DIR [--port P] [--speculative-config JSON] [flags]\n\n"
      "Serves prefills for decode nodes: the prompt's KV goes to the decode node the router chose,\n"
      "layer by layer, then the first token comes back.",
      {
          {"transport", "LIST", "KV transports this node can send over: ucx, grpc or ucx,grpc (default ucx,grpc), or nccl (GPU to GPU)"},
          {"kv-transfer-timeout-ms", "MS", "deadline for a request's KV to reach the decode node (default 30000)"},
          {"commit-timeout-ms", "MS", "deadline of the hand-off commit on the decode node (default 10000)"},
#ifdef BATON_TESTING_HOOKS
          {"testing-hold-kv-transfer", "", "fault injection for tests: never finish a KV transfer"},
#endif
      });
  if (std::optional<int> code = command.parse(argc, argv)) return *code;
  const ParsedFlags& f = command.flags();
  // Before any UCX context exists: UCX listens only on the device of --host (ucx_net_devices.h).
  std::string ucx_why;
  auto ucx_device = kv::restrict_ucx_to_host(f.get("host").value_or("127.0.0.1"), &ucx_why);
  if (!ucx_device.ok()) return command.fail(ucx_device.status());
  if (!ucx_device->empty()) spdlog::info("UCX: network device {} only ({})", *ucx_device, ucx_why);
  auto config = engine_config_from_flags(f, NodeRole::kPrefill);
  if (!config.ok()) return command.fail(config.status());
  PrefillNodeOptions options;
#ifdef BATON_TESTING_HOOKS
  options.hold_transfers = f.has("testing-hold-kv-transfer");
#endif
  for (auto [flag, field] : {std::pair{"kv-transfer-timeout-ms", &options.kv_transfer_timeout},
                             std::pair{"commit-timeout-ms", &options.commit_timeout},
                             std::pair{"handoff-lease-ms", &config->handoff_lease}}) {
    auto v = command.positive_ms(flag);
    if (!v.ok()) return command.fail(v.status());
    if (*v) *field = **v;
  }
  auto kinds = parse_transport_list(f.get("transport").value_or("ucx,grpc"));
  if (!kinds.ok()) return command.fail(kinds.status());
  if (absl::Status s = check_transport_device(*kinds, config->backend.device); !s.ok()) return command.fail(s);
  // NCCL sends from the pools' device memory itself (no host mirrors).
  config->kv_transfer_in_device_memory = (*kinds)[0] == "nccl";

  auto tokenizer = load_tokenizer_if_present(config->model_dir);
  if (!tokenizer.ok()) return command.fail(tokenizer.status());
  auto engine = Engine::create(*config);
  if (!engine.ok()) return command.fail(engine.status());
  if (*tokenizer) attach_tokenizer(**engine, **tokenizer);
  std::vector<kv::MemoryRegion> pools;
  for (const KvPoolInfo& p : (*engine)->kv_pools()) pools.push_back({p.name, p.transfer.base, p.transfer.bytes});
  auto senders = make_kv_senders(*kinds, pools, config->backend.device);
  if (!senders.ok()) return command.fail(senders.status());

  NodeIdentity identity;
  identity.role = "prefill";
  identity.model_name = command.model_name();
  identity.instance_id = new_instance_id();
  identity.transports = *kinds;
  const std::string details = (*engine)->describe();
  PrefillService service(std::move(*engine), tokenizer->get(), std::move(*senders), identity, options);
  std::unique_ptr<metrics::KvTransferMetrics> transfer_metrics;
  return command.serve(
      service, service, "prefill", details, [&](const std::string& address) { service.set_address(address); },
      [&] { service.stop(); },
      [&](metrics::MetricsServer& m, const std::string&) {
        m.add(std::make_shared<metrics::NodeCollector>(
            [&service] { return service.info_snapshot(std::chrono::milliseconds(500)); }));
        // Before the node reports ready: the engine is idle and answers at once.
        const std::optional<node::v1::NodeInfo> info = service.info_snapshot(std::chrono::seconds(10));
        if (!info) return;
        transfer_metrics = std::make_unique<metrics::KvTransferMetrics>(m.registry(), metrics::node_labels(*info));
        m.add(std::make_shared<PrefillStateCollector>(service, metrics::node_labels(*info)));
        metrics::KvTransferMetrics* tm = transfer_metrics.get();
        service.set_transfer_observer({[tm](double seconds) { tm->succeeded(seconds); },
                                       [tm](const char* stage) { tm->failed(stage); }});
      });
}

// Returns only once gRPC has shut down (proto/grpc_exit.h): every gRPC object is gone by now.
int main(int argc, char** argv) { return baton::exit_after_grpc_shutdown(run_prefill_node(argc, argv)); }
