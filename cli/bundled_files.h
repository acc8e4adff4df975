// Where the files that ship with Baton are found at run time: the bundled model family
// (models/baton-tiny-code) and the prompt sets `bench serve` and `verify-lossless` default to
// (bench/data). No path is compiled into the binaries, so an installed copy (the container image's
// /opt/baton) and a build tree find theirs alike. Looked for, first match wins:
//   1. $BATON_HOME, when set: BATON_HOME/models/baton-tiny-code, BATON_HOME/share/baton/bench-data
//      or BATON_HOME/bench/data;
//   2. the directories above the running binary (/proc/self/exe), nearest first: an install
//      prefix (PREFIX/bin/baton: PREFIX/models/..., PREFIX/share/baton/bench-data) or the source
//      tree around a build directory (SRC/build/release/cli/baton: SRC/models/..., SRC/bench/data).
// Not found: an error naming where it looked and the flag that gives the path instead.
//
// Must not: read the files (callers do), or look anywhere but the above.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace baton::cli {

// The directory of the bundled family (holding target/, eagle3/, ...).
absl::StatusOr<std::string> bundled_model_family();
// The directory holding HumanEval.jsonl.gz and spec_bench_question.jsonl.
absl::StatusOr<std::string> bundled_prompt_data();

}  // namespace baton::cli
