#!/usr/bin/env bash
# The proposer sidecar's figures, one JSON object per line on stdout (see bench/sidecar_bench.cc):
# round-trip p50/p99 on loopback at batch 1, 8 and 32 (measured in the decode node's client), and
# on two decode nodes sharing one baton-proposer with the bundled baton-tiny-code model, the mean
# acceptance length and median TPOT of HumanEval tasks asked a second time on the other node, with
# the sidecar's suffix cache global vs per node.
#
#   bench/run_sidecar_bench.sh [BUILD_DIR] [extra sidecar_bench flags, e.g. --tasks 16]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
shift $(( $# > 0 ? 1 : 0 )) || true
cmake --build "$build" --target sidecar_bench baton-proposer baton-decode baton-router >/dev/null
prompts=$(mktemp --suffix=.jsonl)
trap 'rm -f "$prompts"' EXIT
zcat "$root/bench/data/HumanEval.jsonl.gz" > "$prompts"
"$build/bench/sidecar_bench" --bin-dir "$build" --model "$root/models/baton-tiny-code/target" --prompts "$prompts" "$@"
