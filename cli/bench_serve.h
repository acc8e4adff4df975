// `baton bench serve`: a load generator for a running deployment, in the spirit of `vllm bench
// serve` (see serve_runner.h, serve_metrics.h, serve_backend.h, serve_plot.h).
#pragma once

namespace baton::cli {

// argv[0] is "serve".
int bench_serve_main(int argc, char** argv);
// argv[0] is "bench"; dispatches to its subcommands.
int bench_main(int argc, char** argv);

}  // namespace baton::cli
