// The prompts of `baton bench serve`: HumanEval (completion prompts), Spec-Bench (first turn of
// each question, sent as a chat message), any JSONL file (one field per line), or random token
// ids of a given length. Plain .jsonl or gzip-compressed .jsonl.gz.
//
// Must not: talk to a server or tokenize (random prompts are token ids drawn from the vocabulary;
// text prompts go as text and the server counts their tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::cli {

struct ServePrompt {
  std::string text;                     // empty for token-id prompts
  std::vector<std::int32_t> token_ids;  // random prompts only
  bool chat = false;                    // send as one user message through the chat template
};

struct DatasetOptions {
  std::string dataset = "humaneval";  // humaneval | spec-bench | random | jsonl (then `path`)
  std::string path;                   // default for humaneval / spec-bench: the copies in bench/data
  std::string field = "prompt";       // jsonl: the string field holding the prompt
  int num_prompts = 100;              // cycles through the file when it has fewer
  int random_input_len = 128;         // random: prompt length in tokens
  std::int32_t vocab_size = 0;        // random: ids drawn from [0, vocab_size)
  std::uint64_t seed = 0;
};

// NOT_FOUND / INVALID_ARGUMENT naming the file and line when a prompt cannot be read.
absl::StatusOr<std::vector<ServePrompt>> load_serve_prompts(const DatasetOptions& options);

}  // namespace baton::cli
