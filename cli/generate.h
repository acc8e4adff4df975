// `baton generate`: one process, no network — load a model, run one request through the engine,
// print what it generated and how fast (prefill and decode tokens/s on stderr, or one JSON object
// on stdout with --json).
#pragma once

namespace baton::cli {

int generate_main(int argc, char** argv);

}  // namespace baton::cli
