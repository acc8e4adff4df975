// `baton generate --endpoint HOST:PORT`: the same prompts, flags and output as local `baton
// generate`, but the completion comes from a Baton router (a cluster from `baton up`, or any
// deployment) over its gRPC API. Text streams as it arrives; --json prints the same fields
// (speeds and time to first token measured here, at the client); --prompts-file sends every
// prompt at once and prints per-prompt results like the local batch mode.
//
// Must not: load a model or a tokenizer (the router tokenizes).
#pragma once

#include "common/flags.h"
#include "engine/sample/sampling_params.h"

namespace baton::cli {

// Returns the process exit code (0 done; 1 a request failed or the endpoint could not be reached).
int generate_remote(const ParsedFlags& flags, const SamplingParams& sampling);

}  // namespace baton::cli
