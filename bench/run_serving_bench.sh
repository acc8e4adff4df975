#!/usr/bin/env bash
# Disaggregated vs colocated serving on HumanEval prompts (bench/serving_bench.cc): TPOT ratio,
# TTFT overhead of the KV transfer, router overhead per request. One JSON object per line; the
# last is the summary. Runs once without speculation and once with the family's EAGLE-3 head.
#
#   bench/run_serving_bench.sh [BUILD_DIR] [extra serving_bench flags]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
shift $(( $# > 0 ? 1 : 0 )) || true
cmake --build "$build" --target serving_bench baton-prefill baton-decode baton-router >/dev/null
prompts=$(mktemp --suffix=.jsonl)
trap 'rm -f "$prompts"' EXIT
zcat "$root/bench/data/HumanEval.jsonl.gz" > "$prompts"
m="$root/models/baton-tiny-code"
for spec in "" "{\"method\":\"eagle3\",\"model\":\"$m/eagle3\",\"num_speculative_tokens\":4}"; do
  args=(--model "$m/target" --prompts "$prompts" --bin-dir "$build")
  [ -n "$spec" ] && args+=(--speculative-config "$spec")
  "$build/bench/serving_bench" "${args[@]}" "$@"
done
