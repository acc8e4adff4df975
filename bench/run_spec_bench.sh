#!/usr/bin/env bash
# Speculative decoding on HumanEval prompts: for each method and each case (batch 1 greedy, batch
# 8 greedy, batch 1 at temperature 0.8), TPOT and TTFT with and without speculation (paired per
# request in one process, after a warm-up, with equal engine settings), mean acceptance length
# and per-position acceptance. One JSON object per (method, case) on stdout.
#
#   bench/run_spec_bench.sh [fixtures|family|entropy] [BUILD_DIR] [extra spec_bench flags]
#   (e.g. --adaptive both: each method with a fixed draft length and with adaptive_draft_length)
#
# fixtures: the random fixture models (build/release/fixtures, made by the tests or
#           tools/fixtures/make_fixtures.py); family: models/baton-tiny-code; entropy: the family's
#           EAGLE-3 head sampled at temperature 0.8 with lossless verification and with entropy
#           verification (LOSSY) at posterior_alpha 0, 0.4 and 1 (each JSON line's
#           differing_token_share is the share of output tokens that differ from plain sampling).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
which=${1:-fixtures}
build=${2:-$root/build/release}
shift $(( $# > 2 ? 2 : $# )) || true
prompts=$(mktemp --suffix=.jsonl)
trap 'rm -f "$prompts"' EXIT
zcat "$root/bench/data/HumanEval.jsonl.gz" > "$prompts"
k=4
cases=()
if [ "$which" = entropy ]; then
  m="$root/models/baton-tiny-code"
  target="$m/target"
  e3="\"method\":\"eagle3\",\"num_speculative_tokens\":$k,\"model\":\"$m/eagle3\""
  specs=("{$e3}")
  for a in 0 0.4 1; do
    specs+=("{$e3,\"rejection_sampler_config\":{\"enable_entropy_verify\":true,\"posterior_alpha\":$a}}")
  done
  cases=(--cases batch1_t0.8)
elif [ "$which" = family ]; then
  m="$root/models/baton-tiny-code"
  target="$m/target"
  specs=(
    "{\"method\":\"ngram\",\"num_speculative_tokens\":$k,\"prompt_lookup_min\":2,\"prompt_lookup_max\":5}"
    "{\"method\":\"suffix\",\"num_speculative_tokens\":$k}"
    "{\"method\":\"draft_model\",\"num_speculative_tokens\":$k,\"model\":\"$m/draft\"}"
    "{\"method\":\"eagle3\",\"num_speculative_tokens\":$k,\"model\":\"$m/eagle3\"}"
    "{\"method\":\"mtp\",\"num_speculative_tokens\":$k,\"model\":\"$m/mtp\"}"
    "{\"method\":\"medusa\",\"num_speculative_tokens\":$k,\"model\":\"$m/medusa\"}"
    "{\"method\":\"dflash\",\"num_speculative_tokens\":$k,\"model\":\"$m/dflash\"}"
  )
else
  f="$build/fixtures"
  [ -f "$f/manifest.json" ] || /usr/bin/python3 "$root/tools/fixtures/make_fixtures.py" --out "$f" >/dev/null
  target="$f/llama-f32"
  specs=(
    "{\"method\":\"ngram\",\"num_speculative_tokens\":$k,\"prompt_lookup_min\":2,\"prompt_lookup_max\":5}"
    "{\"method\":\"suffix\",\"num_speculative_tokens\":$k}"
    "{\"method\":\"draft_model\",\"num_speculative_tokens\":$k,\"model\":\"$f/spec/draft-llama-f32\"}"
    "{\"method\":\"eagle\",\"num_speculative_tokens\":$k,\"model\":\"$f/spec/eagle-llama-f32\"}"
    "{\"method\":\"eagle3\",\"num_speculative_tokens\":$k,\"model\":\"$f/spec/eagle3-llama-f32\"}"
    "{\"method\":\"mtp\",\"num_speculative_tokens\":$k,\"model\":\"$f/spec/mtp-deepseek-llama-f32\"}"
    "{\"method\":\"medusa\",\"num_speculative_tokens\":$k,\"model\":\"$f/spec/medusa-llama-f32\"}"
    "{\"method\":\"dflash\",\"num_speculative_tokens\":$k,\"model\":\"$f/spec/dflash-llama-f32\"}"
  )
fi
args=()
for s in "${specs[@]}"; do args+=(--spec "$s"); done
"$build/bench/spec_bench" --model "$target" --prompts "$prompts" "${args[@]}" "${cases[@]}" "$@"
