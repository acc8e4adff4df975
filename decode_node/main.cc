// baton-decode: a decode node. Loads the model, validates the P/D rule for the decode role
// (num_speculative_tokens >= 1, or no speculation), receives KV over the transports it offers and
// serves baton.node.v1.DecodeNode until SIGINT/SIGTERM.
#include <cstdio>

#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "decode_node/decode_service.h"
#include "node_common/engine_flags.h"
#include "node_common/grpc_server.h"
#include "node_common/kv_transports.h"
#include "decode_node/kv_receivers.h"
#include "node_common/node_main.h"

namespace {

std::vector<baton::FlagSpec> flags() {
  std::vector<baton::FlagSpec> f = baton::engine_flags();
  f.insert(f.end(), {
      {"host", "HOST", "address to listen on (default 127.0.0.1)"},
      {"port", "PORT", "port to listen on (default 0: any free port, printed when ready)"},
      {"role", "ROLE", "decode (default), or both: a single node that is also expected to prefill"},
      {"transport", "LIST", "KV transports to receive over, preferred first: ucx, grpc or ucx,grpc (default ucx,grpc)"},
      {"handoff-lease-ms", "MS", "how long reserved blocks wait for their commit (default 60000)"},
      {"log-level", "LEVEL", "trace, debug, info, warn, error (default info)"},
      {"help", "", "show this help"},
  });
  return f;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "baton-decode: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace baton;
  block_termination_signals();
  const std::vector<FlagSpec> specs = flags();
  constexpr const char* kSynopsis = "--model DIR [--port P] [--speculative-config JSON] [flags]\n\n"
                                    "Decodes requests whose KV a prefill node pushed here (or prefills them itself),\n"
                                    "with continuous batching and speculative decoding.";
  auto parsed = parse_flags(specs, argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "baton-decode: %s\n\n%s", std::string(parsed.status().message()).c_str(),
                 usage("baton-decode", kSynopsis, specs).c_str());
    return 2;
  }
  const ParsedFlags& f = *parsed;
  if (f.has("help")) {
    std::printf("%s", usage("baton-decode", kSynopsis, specs).c_str());
    return 0;
  }
  if (auto s = init_logging(f.get("log-level").value_or("info")); !s.ok()) return fail(s);
  const std::string role = f.get("role").value_or("decode");
  if (role != "decode" && role != "both") {
    return fail(absl::InvalidArgumentError(str_cat("--role must be decode or both, got '", role, "'")));
  }
  auto config = engine_config_from_flags(f, NodeRole::kDecode);
  if (!config.ok()) return fail(config.status());
  auto lease = f.get_int("handoff-lease-ms");
  if (!lease.ok()) return fail(lease.status());
  if (*lease) {
    if (**lease <= 0) return fail(absl::InvalidArgumentError("--handoff-lease-ms must be positive"));
    config->handoff_lease = std::chrono::milliseconds(**lease);
  }
  auto port = f.get_int("port");
  if (!port.ok()) return fail(port.status());
  auto kinds = parse_transport_list(f.get("transport").value_or("ucx,grpc"));
  if (!kinds.ok()) return fail(kinds.status());

  auto tokenizer = load_tokenizer_if_present(config->model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  auto engine = Engine::create(*config);
  if (!engine.ok()) return fail(engine.status());
  if (*tokenizer) attach_tokenizer(**engine, **tokenizer);

  NodeIdentity identity;
  identity.role = role;
  identity.model_name = model_name_of(config->model_dir);
  identity.instance_id = new_instance_id();
  const std::string details = (*engine)->describe();
  DecodeService service(std::move(*engine), identity, DecodeNodeOptions{});
  if (absl::Status s = add_kv_receivers(*kinds, service); !s.ok()) return fail(s);
  auto server = start_grpc_server(f.get("host").value_or("127.0.0.1"), static_cast<int>(port->value_or(0)), {&service});
  if (!server.ok()) return fail(server.status());
  service.set_address(server->address);
  set_serving(*server->server, true);
  announce_ready("baton-decode", server->address, details);
  serve_until_signal(*server->server, [&] { service.stop(); });
  return 0;
}
