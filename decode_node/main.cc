// baton-decode: a decode node. Loads the model, validates the P/D rule for the decode role
// (num_speculative_tokens >= 1, or no speculation), receives KV over the transports it offers and
// serves baton.node.v1.DecodeNode until SIGINT/SIGTERM.
#include "decode_node/decode_service.h"
#include "decode_node/kv_receivers.h"
#include "node_common/engine_flags.h"
#include "node_common/kv_transports.h"
#include "node_common/node_command.h"
#include "node_common/node_main.h"

int main(int argc, char** argv) {
  using namespace baton;
  block_termination_signals();
  NodeCommand command(
      "baton-decode",
      "--model DIR [--port P] [--speculative-config JSON] [flags]\n\n"
      "Decodes requests whose KV a prefill node pushed here (or prefills them itself), with\n"
      "continuous batching and speculative decoding.",
      {
          {"role", "ROLE", "decode (default), or both: a single node that is also expected to prefill"},
          {"transport", "LIST", "KV transports to receive over, preferred first: ucx, grpc or ucx,grpc (default ucx,grpc)"},
      });
  if (std::optional<int> code = command.parse(argc, argv)) return *code;
  const ParsedFlags& f = command.flags();
  const std::string role = f.get("role").value_or("decode");
  if (role != "decode" && role != "both") {
    return command.fail(absl::InvalidArgumentError(str_cat("--role must be decode or both, got '", role, "'")));
  }
  auto config = engine_config_from_flags(f, NodeRole::kDecode);
  if (!config.ok()) return command.fail(config.status());
  auto lease = command.positive_ms("handoff-lease-ms");
  if (!lease.ok()) return command.fail(lease.status());
  if (*lease) config->handoff_lease = **lease;
  auto kinds = parse_transport_list(f.get("transport").value_or("ucx,grpc"));
  if (!kinds.ok()) return command.fail(kinds.status());

  auto tokenizer = load_tokenizer_if_present(config->model_dir);
  if (!tokenizer.ok()) return command.fail(tokenizer.status());
  // Before the engine: with UCX its KV pools are allocated in shared memory (kv_receivers.h).
  auto setup = prepare_kv_receivers(*kinds, *config);
  if (!setup.ok()) return command.fail(setup.status());
  auto engine = Engine::create(*config);
  if (!engine.ok()) return command.fail(engine.status());
  if (*tokenizer) attach_tokenizer(**engine, **tokenizer);

  NodeIdentity identity;
  identity.role = role;
  identity.model_name = model_name_of(config->model_dir);
  identity.instance_id = new_instance_id();
  const std::string details = (*engine)->describe();
  DecodeService service(std::move(*engine), identity, DecodeNodeOptions{});
  if (absl::Status s = add_kv_receivers(*kinds, *setup, service); !s.ok()) return command.fail(s);
  return command.serve(
      service, role, details, [&](const std::string& address) { service.set_address(address); }, [&] { service.stop(); });
}
