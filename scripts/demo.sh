#!/usr/bin/env bash
# The main job on the bundled model, all set-up included: installs dependencies, builds the
# `baton` CLI, makes the tiny fixture Llama (tools/fixtures), and runs `baton generate` on it.
# Prints the generated token ids on stdout and the prefill/decode speed on stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "${BATON_JOBS:-$(nproc)}" --target baton >/dev/null
fixtures=build/release/fixtures
[ -f "$fixtures/manifest.json" ] || /usr/bin/python3 tools/fixtures/make_fixtures.py --out "$fixtures" >/dev/null

build/release/cli/baton generate --model "$fixtures/llama-f32" \
  --prompt-tokens 5,17,42,99,120,7,64,3 --max-tokens 32 --output token-ids "$@"
