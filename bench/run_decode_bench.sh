#!/usr/bin/env bash
# Decode (batch 1, 8, 32) and prefill speed of a ~110M-parameter random Llama (dim 768, 12 layers,
# 12 heads, vocab 32000, tied embeddings) in F32 and BF16, each as a fraction of this machine's
# memory-bandwidth floor; then batch-1 decode of a random Qwen3-MoE of the same shape whose MLPs are
# 32 experts of 384, 4 per token (BF16): its floor reads the weights one token uses (4 experts per
# layer), so only batch 1 has a meaningful floor. Then the Qwen3-Next hybrid of the same shape and
# experts (3 of 4 layers Gated DeltaNet) against that Qwen3-MoE, batch-1 decode at 256 and 4,096
# tokens of context: the hybrid's step must grow with context only through its attention layers
# (a final "hybrid_context" line: each model's 4,096-over-256 step-time ratio, and the hybrid's
# recurrent-state bytes per slot — what a hand-off moves — and per request at k = 3). The models are generated here (not committed) into
# $BATON_BENCH_DIR.
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
hybrid="$models/qwen3-next-32x384-bfloat16"
long_moe="$models/qwen3-moe-32x384-bfloat16-8k"
if [ ! -f "$hybrid/config.json" ]; then
  /usr/bin/python3 "$root/tools/fixtures/make_random_model.py" --out "$hybrid" --dtype bfloat16 --hybrid --experts 32 \
    --experts-per-token 4 --moe-intermediate 384 --max-position 8192 >&2
fi
if [ ! -f "$long_moe/config.json" ]; then
  /usr/bin/python3 "$root/tools/fixtures/make_random_model.py" --out "$long_moe" --dtype bfloat16 --experts 32 \
    --experts-per-token 4 --moe-intermediate 384 --max-position 8192 >&2
fi
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for model in "$hybrid" "$long_moe"; do
  for context in 256 4096; do
    "$build/bench/decode_bench" --model "$model" --batches 1 --context "$context" --prefill-tokens 256 --verify-k 0 \
      "$@" | tee -a "$lines"
  done
done
/usr/bin/python3 - "$lines" "$hybrid" "$long_moe" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
def step(model, context):
    return next(r["step_seconds_median"] for r in rows
                if r["model"] == model and r["phase"] == "decode" and r["context"] == context)
hybrid, moe = sys.argv[2], sys.argv[3]
state = next(r for r in rows if r["model"] == hybrid and "recurrent_state_bytes_per_slot" in r)
print(json.dumps({"bench": "hybrid_context",
                  "hybrid_step_4096_over_256": step(hybrid, 4096) / step(hybrid, 256),
                  "attention_only_step_4096_over_256": step(moe, 4096) / step(moe, 256),
                  "hybrid_over_attention_only_step_at_4096": step(hybrid, 4096) / step(moe, 4096),
                  "recurrent_state_bytes_per_slot": state["recurrent_state_bytes_per_slot"],
                  # A hand-off moves one slot per recurrent layer (prefill_node/kv_push_plan.cc).
                  "state_bytes_per_handoff": state["recurrent_state_bytes_per_slot"],
                  "recurrent_state_bytes_per_request_k3": 4 * state["recurrent_state_bytes_per_slot"]}))
PY
