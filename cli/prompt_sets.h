// Prompt files for the checks and benchmarks of the `baton` command: JSON Lines, optionally
// gzip-compressed (.gz), one prompt per line as "prompt" (HumanEval, `baton generate
// --prompts-file`), "text", or the first of "turns" (Spec-Bench). The default set interleaves the
// bundled bench/data/HumanEval.jsonl.gz and bench/data/spec_bench_question.jsonl.
//
// Must not: tokenize or shorten prompts (the router judges them).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::cli {

// The lines of a text file, gunzipped when compressed; NOT_FOUND / DATA_LOSS naming the file.
absl::StatusOr<std::vector<std::string>> read_lines(const std::string& path);

// Every prompt in `path`; an unreadable file or a line without a prompt is an error naming the
// file and line.
absl::StatusOr<std::vector<std::string>> load_prompt_file(const std::string& path);

// The first `n` prompts of HumanEval and Spec-Bench, alternately (from `data_dir`).
absl::StatusOr<std::vector<std::string>> default_prompt_set(const std::string& data_dir, int n);

}  // namespace baton::cli
