// The request trace `baton plan` simulates: when each request arrives and how many prompt and
// output tokens it has. Either a JSONL file (one {"arrival_s", "prompt_tokens", "output_tokens"}
// object per line) or the same requests `baton bench serve` would send with the same flags: its
// datasets, --num-prompts, --random-input-len, --max-tokens, --request-rate and --seed give the
// same prompts and the same Poisson arrival times (serve_dataset.h, serve_runner.h), so a plan can
// be checked against a measured run.
//
// Text prompts are counted with the model's tokenizer (special tokens included); chat prompts
// (spec-bench) are counted as plain text, without the chat template's own tokens. Output lengths
// are --max-tokens: the trace assumes every request runs to its limit (bench serve --ignore-eos).
//
// Must not: send requests or time anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/serve_dataset.h"

namespace baton {
class Tokenizer;
}

namespace baton::cli {

struct TraceRequest {
  double arrival_s = 0;
  std::int32_t prompt_tokens = 0;
  std::int32_t output_tokens = 0;
};

// INVALID_ARGUMENT naming the file and line on a malformed line; arrivals need not be sorted (the
// trace is returned sorted by arrival).
absl::StatusOr<std::vector<TraceRequest>> read_trace_jsonl(const std::string& path);

struct DatasetTraceOptions {
  DatasetOptions dataset;
  int max_tokens = 128;
  double request_rate = 0;  // requests/s; inf or <= 0: all at once
};

// `tokenizer` may be null only for the random dataset (its prompts are token ids already).
absl::StatusOr<std::vector<TraceRequest>> trace_from_dataset(const DatasetTraceOptions& options, const Tokenizer* tokenizer);

}  // namespace baton::cli
