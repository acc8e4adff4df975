#!/usr/bin/env bash
# The main job on the bundled model, all set-up included: installs dependencies, builds Baton,
# starts a local cluster with `baton up` (a prefill node, a decode node drafting with the bundled
# EAGLE-3 head, and the router, as child processes on loopback; the prompt's KV moves from the
# prefill node to the decode node over UCX), then streams a completion of a Python prompt through
# the router with `baton generate --endpoint`, and stops the cluster.
# Prints the generated text on stdout as it streams (exactly the target model's greedy output:
# speculation is lossless), then on stderr the speed, the speculative-decoding acceptance and
# which nodes served it. Extra flags go to `baton generate`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "${BATON_JOBS:-$(nproc)}" --target baton baton-prefill baton-decode baton-router >/dev/null
baton=build/release/cli/baton

run=$(mktemp -d)
mkfifo "$run/up.out"
"$baton" up --port 0 --log-dir "$run/logs" >"$run/up.out" 2>"$run/up.err" &
up=$!
trap 'kill -TERM $up 2>/dev/null || true; wait $up 2>/dev/null || true; rm -rf "$run"' EXIT
exec 3<"$run/up.out"
# `baton up` prints one line once every node is ready: "baton up: router ready on HOST:PORT (...)".
if ! read -r -t 300 ready <&3; then
  echo "demo: the local cluster did not start:" >&2
  cat "$run/up.err" >&2
  exit 1
fi
endpoint=$(sed -n 's/.*router ready on \([^ ]*\).*/\1/p' <<<"$ready")

"$baton" generate --endpoint "$endpoint" --prompt "def fibonacci(n):" --max-tokens 96 "$@"
