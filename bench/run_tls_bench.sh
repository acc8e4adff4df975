#!/usr/bin/env bash
# What security costs on the request path (bench/tls_bench.cc): a plain cluster and a `baton up
# --tls` cluster with an API key, side by side on HumanEval prompts. Per prompt and in a summary:
# TTFT, decode tokens/s and KV transfer GB/s as ratios secure / plain (medians of per-prompt
# ratios). Three runs: HumanEval's prompts as they are over UCX (TTFT and tokens/s), six joined
# into one over UCX (several MB of KV per transfer, so the commit call's fixed cost weighs less in
# the KV rate), and the same over gRPC (whose KV bytes TLS encrypts). One JSON object per line.
#
#   bench/run_tls_bench.sh [BUILD_DIR] [extra tls_bench flags]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
shift $(( $# > 0 ? 1 : 0 )) || true
cmake --build "$build" --target tls_bench baton-prefill baton-decode baton-router >/dev/null
prompts=$(mktemp --suffix=.jsonl)
trap 'rm -f "$prompts"' EXIT
zcat "$root/bench/data/HumanEval.jsonl.gz" > "$prompts"
run() {
  "$build/bench/tls_bench" --model "$root/models/baton-tiny-code/target" --prompts "$prompts" --bin-dir "$build" "$@"
}
run --transport ucx --num-prompts 24 "$@"
run --transport ucx --join 6 --max-tokens 32 "$@"
run --transport grpc --join 6 --max-tokens 32 "$@"
