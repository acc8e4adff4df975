#!/usr/bin/env bash
# The main job on the bundled model, all set-up included: installs dependencies, builds the
# `baton` CLI, makes the tiny fixture models (tools/fixtures), and runs `baton generate` with a
# text prompt on the Llama-3-style one. Prints the generated text on stdout (streamed as it is
# generated) and the prefill/decode speed on stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "${BATON_JOBS:-$(nproc)}" --target baton >/dev/null
fixtures=build/release/fixtures
[ -f "$fixtures/manifest.json" ] || /usr/bin/python3 tools/fixtures/make_fixtures.py --out "$fixtures" >/dev/null

build/release/cli/baton generate --model "$fixtures/llama3-bf16" --prompt "def fibonacci(n):" \
  --max-tokens 32 "$@"
