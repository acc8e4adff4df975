// `baton generate --prompts-file FILE.jsonl`: an offline batch through one engine with
// continuous batching. Each line of FILE is a JSON object with `prompt` (text; needs the model's
// tokenizer) or `prompt_tokens` (a list of ids), and optionally `seed`, `max_tokens`,
// `temperature`; every other sampling setting comes from the command line. Blank lines are
// skipped; a bad line is an error naming FILE:LINE before anything runs.
//
// Output: with --json, one object per prompt as it finishes (`index` is its line's position among
// the prompts; the fields of a single --json run), then one summary object (`"summary": true`,
// totals, wall time, throughput, speculation counters). Without --json, each completion in input
// order under a `=== index ===` header. The speed summary always goes to stderr.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace baton::cli {

struct BatchOptions {
  std::string path;
  std::string model_dir;
  SamplingParams defaults;  // from the flags; lines override seed, max_tokens, temperature
  bool json = false;
  bool token_ids = false;  // print token ids instead of text
};

struct BatchPrompt {
  std::optional<std::string> text;  // when read with keep_text (a remote endpoint tokenizes)
  std::vector<std::int32_t> tokens;
  SamplingParams params;
};

// Reads and checks every line (errors name FILE:LINE). Text prompts are encoded with `tokenizer`,
// or kept as text with keep_text.
absl::StatusOr<std::vector<BatchPrompt>> read_prompts_file(const BatchOptions& options, const Tokenizer* tokenizer,
                                                           bool keep_text);

// Returns the process exit code (0: every prompt ran; 1: bad input or an engine failure).
int run_prompts_file(Engine& engine, const Tokenizer* tokenizer, const BatchOptions& options);

}  // namespace baton::cli
