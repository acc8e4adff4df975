// `baton`: the command-line entry. Dispatches to one subcommand per file in cli/.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/bench_serve.h"
#include "cli/generate.h"
#include "cli/plan.h"
#include "cli/probe.h"
#include "cli/tokenize.h"
#include "cli/up.h"
#include "cli/verify_lossless.h"
#include "proto/grpc_exit.h"

namespace {

void print_help() {
  std::printf(
      "baton: LLM serving with prefill/decode disaggregation and lossless speculative decoding\n\n"
      "usage: baton <command> [flags]\n\n"
      "commands:\n"
      "  bench      load-test a running deployment (`baton bench serve`)\n"
      "  generate   run one prompt through a model in this process and print the result and speed\n"
      "  plan       size a deployment: profile its speeds, simulate a trace, print the cheapest P:D and k\n"
      "  probe      ask a Baton process whether it serves (Kubernetes exec probes over TLS)\n"
      "  tokenize   encode lines of text to token ids (or decode ids with --decode)\n"
      "  up         start a local cluster (prefill nodes, decode nodes, router) and serve until Ctrl-C\n"
      "  verify-lossless  check that a running deployment's speculative decoding does not change its output\n\n"
      "Run `baton <command> --help` for a command's flags.\n");
}

}  // namespace

static int run_command(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "bench") return baton::cli::bench_main(argc - 1, argv + 1);
  if (command == "generate") return baton::cli::generate_main(argc - 1, argv + 1);
  if (command == "plan") return baton::cli::plan_main(argc - 1, argv + 1);
  if (command == "probe") return baton::cli::probe_main(argc - 1, argv + 1);
  if (command == "tokenize") return baton::cli::tokenize_main(argc - 1, argv + 1);
  if (command == "up") return baton::cli::up_main(argc - 1, argv + 1);
  if (command == "verify-lossless") return baton::cli::verify_lossless_main(argc - 1, argv + 1);
  std::fprintf(stderr, "baton: unknown command '%s'\n\n", command.c_str());
  print_help();
  return 2;
}

// Returns only once gRPC has shut down (proto/grpc_exit.h): every gRPC object is gone by now.
int main(int argc, char** argv) { return baton::exit_after_grpc_shutdown(run_command(argc, argv)); }
