#!/usr/bin/env bash
# Decode (batch 1, 8, 32) and prefill speed of a ~110M-parameter random Llama (dim 768, 12 layers,
# 12 heads, vocab 32000, tied embeddings) in F32 and BF16, each as a fraction of this machine's
# memory-bandwidth floor; then batch-1 decode of a random Qwen3-MoE of the same shape whose MLPs are
# 32 experts of 384, 4 per token (BF16): its floor reads the weights one token uses (4 experts per
# layer), so only batch 1 has a meaningful floor. The models are generated here (not committed)
# into $BATON_BENCH_DIR.
# On CPUs with AVX512_BF16 the BF16 model also runs on the opt-in avx512bf16 tier (unless the
# flags name a --cpu-isa); each line's "backend" says which tier it is.
# Prints one JSON object per line. Usage: bench/run_decode_bench.sh [BUILD_DIR] [extra decode_bench flags]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
shift || true
models=${BATON_BENCH_DIR:-$build/bench-models}
mkdir -p "$models"
for dtype in float32 bfloat16; do
  dir="$models/llama-110m-$dtype"
  if [ ! -f "$dir/config.json" ]; then
    /usr/bin/python3 "$root/tools/fixtures/make_random_model.py" --out "$dir" --dtype "$dtype" >&2
  fi
  "$build/bench/decode_bench" --model "$dir" "$@"
  # BF16 weights once more on the opt-in BF16-dot tier, where the CPU has it and no tier was asked for.
  if [ "$dtype" = bfloat16 ] && grep -qw avx512_bf16 /proc/cpuinfo && [[ " $* " != *" --cpu-isa "* ]]; then
    "$build/bench/decode_bench" --model "$dir" --cpu-isa avx512bf16 "$@"
  fi
done
moe="$models/qwen3-moe-32x384-bfloat16"
if [ ! -f "$moe/config.json" ]; then
  /usr/bin/python3 "$root/tools/fixtures/make_random_model.py" --out "$moe" --dtype bfloat16 --experts 32 \
    --experts-per-token 4 --moe-intermediate 384 >&2
fi
"$build/bench/decode_bench" --model "$moe" --batches 1 "$@"
