// baton-prefill: a prefill node. Loads the model, validates the P/D rule for the prefill role
// (num_speculative_tokens = 1), serves baton.node.v1.PrefillNode until SIGINT/SIGTERM.
#include <cstdio>

#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "node_common/engine_flags.h"
#include "node_common/grpc_server.h"
#include "node_common/kv_transports.h"
#include "prefill_node/kv_senders.h"
#include "node_common/node_main.h"
#include "prefill_node/prefill_service.h"

namespace {

std::vector<baton::FlagSpec> flags() {
  std::vector<baton::FlagSpec> f = baton::engine_flags();
  f.insert(f.end(), {
      {"host", "HOST", "address to listen on (default 127.0.0.1)"},
      {"port", "PORT", "port to listen on (default 0: any free port, printed when ready)"},
      {"transport", "LIST", "KV transports this node can send over: ucx, grpc or ucx,grpc (default ucx,grpc)"},
      {"kv-transfer-timeout-ms", "MS", "deadline for a request's KV to reach the decode node (default 30000)"},
      {"commit-timeout-ms", "MS", "deadline of the hand-off commit on the decode node (default 10000)"},
      {"handoff-lease-ms", "MS", "how long prefilled KV is held for its transfer at most (default 60000)"},
      {"testing-hold-kv-transfer", "", "fault injection for tests: never finish a KV transfer"},
      {"log-level", "LEVEL", "trace, debug, info, warn, error (default info)"},
      {"help", "", "show this help"},
  });
  return f;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "baton-prefill: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace baton;
  block_termination_signals();
  const std::vector<FlagSpec> specs = flags();
  constexpr const char* kSynopsis = "--model DIR [--port P] [--speculative-config JSON] [flags]\n\n"
                                    "Serves prefills for decode nodes: the prompt's KV goes to the decode node the\n"
                                    "router chose, layer by layer, then the first token comes back.";
  auto parsed = parse_flags(specs, argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "baton-prefill: %s\n\n%s", std::string(parsed.status().message()).c_str(),
                 usage("baton-prefill", kSynopsis, specs).c_str());
    return 2;
  }
  const ParsedFlags& f = *parsed;
  if (f.has("help")) {
    std::printf("%s", usage("baton-prefill", kSynopsis, specs).c_str());
    return 0;
  }
  if (auto s = init_logging(f.get("log-level").value_or("info")); !s.ok()) return fail(s);
  auto config = engine_config_from_flags(f, NodeRole::kPrefill);
  if (!config.ok()) return fail(config.status());
  PrefillNodeOptions options;
  for (auto [flag, field] : {std::pair{"kv-transfer-timeout-ms", &options.kv_transfer_timeout},
                             std::pair{"commit-timeout-ms", &options.commit_timeout},
                             std::pair{"handoff-lease-ms", &config->handoff_lease}}) {
    auto v = f.get_int(flag);
    if (!v.ok()) return fail(v.status());
    if (*v) {
      if (**v <= 0) return fail(absl::InvalidArgumentError(str_cat("--", flag, " must be positive")));
      *field = std::chrono::milliseconds(**v);
    }
  }
  options.hold_transfers = f.has("testing-hold-kv-transfer");
  auto port = f.get_int("port");
  if (!port.ok()) return fail(port.status());
  auto kinds = parse_transport_list(f.get("transport").value_or("ucx,grpc"));
  if (!kinds.ok()) return fail(kinds.status());

  auto tokenizer = load_tokenizer_if_present(config->model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  auto engine = Engine::create(*config);
  if (!engine.ok()) return fail(engine.status());
  if (*tokenizer) attach_tokenizer(**engine, **tokenizer);
  std::vector<kv::MemoryRegion> pools;
  for (const KvPoolInfo& p : (*engine)->kv_pools()) pools.push_back({p.name, p.cache->region().base, p.cache->region().bytes});
  auto senders = make_kv_senders(*kinds, pools);
  if (!senders.ok()) return fail(senders.status());

  NodeIdentity identity;
  identity.role = "prefill";
  identity.model_name = model_name_of(config->model_dir);
  identity.instance_id = new_instance_id();
  identity.transports = *kinds;
  const std::string details = (*engine)->describe();
  PrefillService service(std::move(*engine), tokenizer->get(), std::move(*senders), identity, options);
  auto server = start_grpc_server(f.get("host").value_or("127.0.0.1"), static_cast<int>(port->value_or(0)), {&service});
  if (!server.ok()) return fail(server.status());
  service.set_address(server->address);
  set_serving(*server->server, true);
  announce_ready("baton-prefill", server->address, details);
  serve_until_signal(*server->server, [&] { service.stop(); });
  return 0;
}
