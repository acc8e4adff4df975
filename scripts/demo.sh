#!/usr/bin/env bash
# The main job on the bundled model, all set-up included: installs dependencies, builds the
# `baton` CLI and completes a Python prompt with the bundled trained model
# (models/baton-tiny-code/target), drafting with its EAGLE-3 head (lossless: the output is exactly
# the target's greedy output). Prints the generated text on stdout (streamed as it is generated),
# then the speed and the speculative-decoding acceptance on stderr. Extra flags go to `baton generate`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "${BATON_JOBS:-$(nproc)}" --target baton >/dev/null
family=models/baton-tiny-code

build/release/cli/baton generate --model "$family/target" --prompt "def fibonacci(n):" --max-tokens 96 \
  --speculative-config "{\"method\":\"eagle3\",\"model\":\"$family/eagle3\",\"num_speculative_tokens\":4}" "$@"
