// baton-decode: a decode node. Loads the model, validates the P/D rule for the decode role
// (num_speculative_tokens >= 1, or no speculation), receives KV over the transports it offers and
// serves baton.node.v1.DecodeNode until SIGINT/SIGTERM. Built a second time, with the tests only,
// as baton-decode-testing (BATON_TESTING_HOOKS): that one alone takes --testing-broken-rejection-sampler.
#include <unistd.h>

#include "decode_node/decode_service.h"
#include "decode_node/kv_receivers.h"
#include "decode_node/sidecar_proposer.h"
#include "engine/model/config.h"
#include "metrics/node_collector.h"
#include "node_common/engine_flags.h"
#include "node_common/kv_transports.h"
#include "node_common/node_command.h"
#include "node_common/node_main.h"
#include "kv_transfer/ucx_net_devices.h"
#include "proto/grpc_exit.h"
#include "spdlog/spdlog.h"

static int run_decode_node(int argc, char** argv) {
  using namespace baton;
  block_termination_signals();
  NodeCommand command(
      "baton-decode",
      "--model DIR [--port P] [--speculative-config JSON] [flags]\n\n"
      "Decodes requests whose KV a prefill node pushed here (or prefills them itself), with\n"
      "continuous batching and speculative decoding.",
      {
          {"role", "ROLE", "decode (default), or both: a single node that is also expected to prefill"},
          {"transport", "LIST", "KV transports to receive over, preferred first: ucx, grpc or ucx,grpc (default ucx,grpc), or nccl (GPU to GPU)"},
          {"write-quarantine-ms", "MS",
           "longest that blocks of an ended reservation stay out of use while its prefill node may still write them "
           "and has not been heard from (default 600000)"},
#ifdef BATON_TESTING_HOOKS
          {"testing-broken-rejection-sampler", "",
           "verify drafts with a deliberately lossy sampler (the negative control of `baton verify-lossless`); "
           "output is NOT the model's"},
#endif
      });
  if (std::optional<int> code = command.parse(argc, argv)) return *code;
  const ParsedFlags& f = command.flags();
  // Before any UCX context exists: UCX listens only on the device of --host (ucx_net_devices.h).
  std::string ucx_why;
  auto ucx_device = kv::restrict_ucx_to_host(f.get("host").value_or("127.0.0.1"), &ucx_why);
  if (!ucx_device.ok()) return command.fail(ucx_device.status());
  if (!ucx_device->empty()) spdlog::info("UCX: network device {} only ({})", *ucx_device, ucx_why);
  const std::string role = f.get("role").value_or("decode");
  if (role != "decode" && role != "both") {
    return command.fail(absl::InvalidArgumentError(str_cat("--role must be decode or both, got '", role, "'")));
  }
  auto config = engine_config_from_flags(f, NodeRole::kDecode);
  if (!config.ok()) return command.fail(config.status());
  auto lease = command.positive_ms("handoff-lease-ms");
  if (!lease.ok()) return command.fail(lease.status());
  if (*lease) config->handoff_lease = **lease;
  auto quarantine = command.positive_ms("write-quarantine-ms");
  if (!quarantine.ok()) return command.fail(quarantine.status());
  if (*quarantine) config->write_quarantine_limit = **quarantine;
#ifdef BATON_TESTING_HOOKS
  config->testing_broken_rejection_sampler = f.has("testing-broken-rejection-sampler");
#endif
  auto kinds = parse_transport_list(f.get("transport").value_or("ucx,grpc"));
  if (!kinds.ok()) return command.fail(kinds.status());

  auto tokenizer = load_tokenizer_if_present(config->model_dir);
  if (!tokenizer.ok()) return command.fail(tokenizer.status());
  // A proposer sidecar named in the speculative config drafts for this node; the engine's own
  // proposer stays as the fallback (decode_node/sidecar_proposer.h).
  EngineHooks hooks;
  std::shared_ptr<SidecarStats> sidecar_stats;
  if (config->speculative && !config->speculative->proposer_endpoint.empty()) {
    auto model_config = ModelConfig::load(config->model_dir);
    if (!model_config.ok()) return command.fail(model_config.status());
    sidecar_stats = std::make_shared<SidecarStats>();
    sidecar_stats->endpoint = config->speculative->proposer_endpoint;
    SidecarProposerOptions so;
    so.connection.endpoint = config->speculative->proposer_endpoint;
    so.connection.node_id = str_cat("decode pid ", ::getpid());
    so.connection.speculative_config = config->speculative->to_json().dump();
    so.budget = std::chrono::microseconds(static_cast<std::int64_t>(config->speculative->proposer_budget_ms * 1000.0));
    so.vocab_size = model_config->vocab_size;
    hooks.wrap_proposer = [so, sidecar_stats](std::unique_ptr<Proposer> local) -> std::unique_ptr<Proposer> {
      return std::make_unique<SidecarProposer>(so, std::move(local), sidecar_stats);
    };
  }
  // Before the engine: with UCX its KV pools are allocated in shared memory (kv_receivers.h).
  auto setup = prepare_kv_receivers(*kinds, *config);
  if (!setup.ok()) return command.fail(setup.status());
  auto engine = Engine::create(*config, hooks);
  if (!engine.ok()) return command.fail(engine.status());
  if (*tokenizer) attach_tokenizer(**engine, **tokenizer);

  NodeIdentity identity;
  identity.role = role;
  identity.model_name = command.model_name();
  identity.instance_id = new_instance_id();
  const std::string details = (*engine)->describe();
  DecodeNodeOptions node_options;
  node_options.sidecar_stats = sidecar_stats;
  DecodeService service(std::move(*engine), identity, node_options);
  if (absl::Status s = add_kv_receivers(*kinds, *setup, service); !s.ok()) return command.fail(s);
  return command.serve(
      service, service, role, details, [&](const std::string& address) { service.set_address(address); }, [&] { service.stop(); },
      [&](metrics::MetricsServer& m, const std::string&) {
        m.add(std::make_shared<metrics::NodeCollector>(
            [&service] { return service.info_snapshot(std::chrono::milliseconds(500)); }));
      });
}

// Returns only once gRPC has shut down (proto/grpc_exit.h): every gRPC object is gone by now.
int main(int argc, char** argv) { return baton::exit_after_grpc_shutdown(run_decode_node(argc, argv)); }
