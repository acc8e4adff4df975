#!/usr/bin/env bash
# Per-kernel GPU time of llama_decode_bench's decode steps under Nsight Compute, on the GPU machine,
# from the bundle (scripts/bundle-gpu.sh; carried as gpu-bundle/): where a decode step's time goes.
#
#   bash bench/gpu/profile_decode.sh [BATCH...]     (default: 1 64)
#
# For each batch size: a 2-layer model of the 8B shape, context 512, graphs off (each kernel is
# its own launch), one warm-up and two timed steps; ncu reads gpu__time_duration only, with
# --clock-control none (the card's clocks are left alone). Prints bench/gpu/ncu_summary.py's table
# per batch into ${OUT:-/tmp/baton-profile}/profile_bBATCH.txt; the CSVs stay in /tmp/baton-profile.
#
# Must not: build anything, change the GPU's settings, or write outside $OUT and /tmp.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-/tmp/baton-profile}
csv=/tmp/baton-profile
mkdir -p "$out" "$csv" /tmp/baton-profile-bundle
tar -xJf "$repo/gpu-bundle/bundle.tar.xz" -C /tmp/baton-profile-bundle || exit 1
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
[ -n "$ncu" ] || { echo "profile_decode: ncu not found" >&2; exit 1; }
batches=("$@")
[ ${#batches[@]} -gt 0 ] || batches=(1 64)
for b in "${batches[@]}"; do
  echo "== batch $b"
  # Kernels launched before the first decode step (weight and cache fills, the copy) are skipped
  # with --skip-first: the summary counts from the first decode step on.
  timeout 240 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
    /tmp/baton-profile-bundle/bin/llama_decode_bench --batches "$b" --context 512 --layers 2 --warmup 1 --steps 2 \
    --prefill 0 --graphs off --copy-gib 0.25 >"$csv/ncu_b$b.csv" 2>"$csv/ncu_b$b.err" ||
    { echo "ncu failed (exit $?)"; tail -n 5 "$csv/ncu_b$b.err"; continue; }
  python3 "$repo/bench/gpu/ncu_summary.py" "$csv/ncu_b$b.csv" | tee "$out/profile_b$b.txt"
done
