#!/usr/bin/env bash
# The GPU check, in ONE command on the GPU machine (docs/cuda.md): run from the repository root over
# the working tree plus the bundle that scripts/bundle-gpu.sh made here (carried as gpu-bundle/).
#
#   bash bench/gpu/run_device_checks.sh [--cpu-only] [--bundle gpu-bundle] [--budget 450] [--skip STEP,...]
#
# Steps (each with its own `timeout`, all within --budget seconds, 450 by default, so the whole
# check ends inside 8 minutes even when something hangs; a failed step does not stop the others):
#   env     nvidia-smi, driver / nvcc / torch / transformers versions, the bundle's libraries resolve
#           (ldd: no "not found"), the bundle was built from this tree's commit
#   tests   the CUDA test executables (ctest label `cuda`, and the `*cuda*` instances of the engine
#           tests that have them) with gtest XML output; every test must pass (none may fail, and
#           not all may skip)
#   greedy  greedy token ids, CUDA vs CPU, plain and with speculation (bench/gpu/greedy_equivalence.py)
#   logits  our CUDA logits vs the fixtures' float64 reference and vs transformers (float32, eager)
#           (bench/gpu/dump_logits + bench/gpu/compare_hf_logits.py)
#   spec    the bundled family's DFlash, MTP and EAGLE-3 (k = 4) against plain decoding, greedy at
#           batch 1 and 8 (bench/spec_bench --device cuda): speedup and acceptance; fails if any
#           request's tokens differ from plain decoding's (runs after speed_baton, when budget is left)
#   speed   Llama-3.1-8B-shaped decode at batch 1, 8 and 64 and a 512-token prefill: ours
#           (bench/gpu/llama_decode_bench, batch invariant and --no-batch-invariant) vs the copy
#           bandwidth, prefill TFLOP/s vs torch's BF16 matmul (bench/gpu/tensor_core_peak.py), and
#           decode vs transformers (bench/gpu/hf_decode_speed.py: eager; torch.compile
#           too when the budget allows — its failure is reported, not a failed check); and batch 16
#           at context 4096 with an F32 and a BF16 KV cache (figures only)
# Results: ${OUT:-/tmp/baton-gpu-check}/ holds summary.json (pass/fail per step, key figures),
# check.log (this console output) and logs.tar.gz (every step's logs and JSON), refreshed after
# each step — three files, within what the device tool brings back. The work files themselves stay
# in $BATON_CHECK_WORK (default /tmp/baton-gpu-check-work). Exit status: 0 only when every step
# that ran passed.
#
# --cpu-only: the same plumbing on a machine without a GPU (greedy compares CPU 1 thread vs all
# cores, dump_logits runs on the CPU, the CUDA kernel tests run with a CPU backend standing in for
# the GPU (BATON_TWIN_ON_CPU=1) and the other CUDA tests skip, llama_decode_bench runs
# its tiny --small model on the CPU, and transformers' speed is skipped):
# finds script bugs here instead of on scarce GPU minutes.
#
# Must not: build anything (the bundle is prebuilt), reach the network, change the GPU's settings,
# or write outside $OUT, $BATON_CHECK_WORK and the bundle's unpack directory.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
cpu_only=false
bundle=gpu-bundle
budget=450
skip=","
while [ $# -gt 0 ]; do
  case $1 in
    --cpu-only) cpu_only=true ;;
    --bundle) bundle=$2; shift ;;
    --budget) budget=$2; shift ;;
    --skip) skip=",$2,"; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "run_device_checks: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

start=$(date +%s)
deadline=$((start + budget))
result_dir=${OUT:-/tmp/baton-gpu-check}
work=${BATON_CHECK_WORK:-/tmp/baton-gpu-check-work}
unpacked=${BATON_BUNDLE_DIR:-/tmp/baton-gpu-bundle}
mkdir -p "$result_dir"
rm -rf "$work" && mkdir -p "$work/steps"
exec > >(tee "$result_dir/check.log") 2>&1
tee_pid=$!
# Exit only once tee has written everything (the summary is the last thing printed).
finish() {
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit "$1"
}
# The Python with numpy and torch: python3 on the GPU machine; $PYTHON, else the first that has them.
py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in python3 /usr/bin/python3; do "$c" -c 'import numpy, torch' 2>/dev/null && { py=$c; break; }; done
  py=${py:-python3}
fi
nproc_all=$(nproc)
export BATON_SOURCE_DIR=$repo
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

say() { printf '[%4ds] %s\n' $(( $(date +%s) - start )) "$*"; }

# Seconds a step may take: at most CAP, leaving RESERVE seconds (for the default 450 s budget;
# scaled with --budget) to the required steps after it. 0 when there is not enough left (the step
# is then skipped).
step_timeout() {
  local cap=$1 reserve=$(( $2 * budget / 450 )) left
  left=$((deadline - $(date +%s) - reserve))
  [ "$left" -gt "$cap" ] && left=$cap
  [ "$left" -lt 10 ] && left=0
  echo "$left"
}

# record STEP STATUS SECONDS NOTE: one JSON file per step, then refresh summary and logs.
record() {
  "$py" - "$work/steps/$1.json" "$1" "$2" "$3" "$4" <<'EOF'
import json, sys
path, name, status, seconds, note = sys.argv[1:]
json.dump({"step": name, "status": status, "seconds": int(seconds), "note": note}, open(path, "w"))
EOF
  publish
}

publish() {
  "$py" bench/gpu/summarize_checks.py --work "$work" --out "$result_dir/summary.json" --quiet \
    --budget "$budget" --elapsed $(( $(date +%s) - start )) $($cpu_only && echo --cpu-only) || true
  tar -C "$work" -czf "$result_dir/logs.tar.gz.tmp" . 2>/dev/null && mv "$result_dir/logs.tar.gz.tmp" "$result_dir/logs.tar.gz"
}

# run_step NAME CAP RESERVE -- COMMAND...: runs COMMAND under `timeout`, logs to $work/NAME.log.
run_step() {
  local name=$1 cap=$2 reserve=$3 t s0 rc status note=""
  shift 4
  if [[ $skip == *",$name,"* ]]; then
    say "$name: skipped (--skip)"; record "$name" skipped 0 "--skip"; return 0
  fi
  t=$(step_timeout "$cap" "$reserve")
  if [ "$t" -eq 0 ]; then
    say "$name: skipped (out of budget)"; record "$name" skipped 0 "out of budget"; return 0
  fi
  say "$name: start (timeout ${t}s)"
  s0=$(date +%s)
  if declare -F "$1" >/dev/null; then
    timeout --kill-after=5 "$t" bash -c "$1" >"$work/$name.log" 2>&1  # a step function (exported below)
  else
    timeout --kill-after=5 "$t" "$@" >"$work/$name.log" 2>&1
  fi
  rc=$?
  if [ $rc -eq 0 ]; then status=pass; elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status=fail; note="timed out after ${t}s"; else status=fail; note="exit $rc"; fi
  tail -n 12 "$work/$name.log" | sed 's/^/    /'
  say "$name: $status${note:+ ($note)} in $(( $(date +%s) - s0 ))s"
  record "$name" "$status" $(( $(date +%s) - s0 )) "$note"
}

# ---------------------------------------------------------------------------------------- bundle
say "baton GPU check: repo $repo, bundle $bundle, budget ${budget}s, results $result_dir$($cpu_only && echo ', CPU-only plumbing run')"
unpack_bundle() {
  rm -rf "$unpacked" && mkdir -p "$unpacked" || return 1
  if [ -f "$bundle/bundle.tar.xz" ]; then
    tar -xJf "$bundle/bundle.tar.xz" -C "$unpacked" 2>/dev/null ||
      "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle/bundle.tar.xz" "$unpacked"
  elif [ -d "$bundle/bin" ]; then
    cp -a "$bundle/." "$unpacked/"
  else
    echo "no bundle at $bundle (run scripts/bundle-gpu.sh first and carry gpu-bundle)" >&2
    return 1
  fi
}
if ! unpack_bundle; then
  say "bundle: missing or unreadable — nothing can run"
  record bundle fail 0 "no bundle at $bundle"
  finish 1
fi
B=$unpacked
# The bundled libstdc++ and libgcc_s come from Debian 12 and need glibc 2.36 / 2.35; on an older glibc
# the machine's own (backward compatible) copies must serve instead.
probe=$("$B/bin/dump_logits" 2>&1)  # (captured first: with pipefail its exit status 2 would fail a pipe)
if grep -q "version .GLIBC_" <<<"$probe"; then
  say "bundle: this glibc is older than the bundle's libstdc++ needs; using the machine's libstdc++/libgcc_s"
  mkdir -p "$B/lib.unused" && mv "$B"/lib/libstdc++.so.* "$B"/lib/libgcc_s.so.* "$B/lib.unused/" 2>/dev/null
fi
fixtures=$B/fixtures
if [ ! -f "$fixtures/manifest.json" ]; then
  # A bundle made with --no-fixtures: make them here (tools/fixtures needs only torch).
  say "fixtures: not in the bundle, making them with $py"
  fixtures=$work/fixtures
  timeout 120 "$py" tools/fixtures/make_fixtures.py --out "$fixtures" >"$work/fixtures.log" 2>&1 ||
    say "fixtures: make_fixtures.py failed (see fixtures.log); the fixture checks will fail"
fi
export BATON_FIXTURES_DIR=$fixtures

# CUDA's runtime libraries are not bundled: they must match the machine's toolkit and driver. The
# executables' RUNPATH already names /usr/local/cuda's lib directories; only when a library is
# neither there nor known to the dynamic linker is its directory (e.g. the pip nvidia-* packages
# next to torch) added to LD_LIBRARY_PATH — never otherwise, because LD_LIBRARY_PATH would also
# override the CUDA libraries torch itself loads. (libnccl.so.2 is dlopen'ed by the NCCL KV link
# test; torch's pip packages usually carry the one found there.)
cuda_lib_dirs() {
  local lib d known
  known=$(ldconfig -p 2>/dev/null)
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    grep -qF "$lib" <<<"$known" && continue
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      [ -e "$d/$lib" ] && continue 2
    done
    for d in /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/lib /usr/local/cuda-13*/targets/x86_64-linux/lib \
             $("$py" -c 'import nvidia, os; [print(p) for p in nvidia.__path__]' 2>/dev/null); do
      [ -d "$d" ] || continue
      find -L "$d" -maxdepth 4 -name "$lib" -printf '%h\n' 2>/dev/null | head -n 1
    done
  done | awk '!seen[$0]++' | paste -sd: -
}
extra=$(cuda_lib_dirs)
[ -n "$extra" ] && export LD_LIBRARY_PATH="$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The step functions run under `timeout` in a child bash: they see these exported names.
export B fixtures work py cpu_only nproc_all
# ---------------------------------------------------------------------------------------- a. env
env_step() {
  echo "== machine"; uname -a; echo "cores: $nproc_all"; ldd --version 2>&1 | head -n 1
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
  else
    echo "nvidia-smi: not found"
  fi
  echo "== nvcc"; (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null || echo "nvcc: not found") | tail -n 2
  echo "== python"; "$py" -c 'import sys; print(sys.version.split()[0])'
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n 1
  "$py" -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -n 1
  echo "== bundle"; cp "$B/manifest.json" "$work/bundle_manifest.json" 2>/dev/null
  "$py" -c 'import json, sys; m = json.load(open(sys.argv[1])); print({k: m.get(k) for k in ("commit", "dirty", "built", "build_type", "cuda_code")})' "$B/manifest.json"
  echo "tree commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  local bad=0 exe
  for exe in "$B"/bin/*; do
    if ldd "$exe" | grep -q "not found"; then
      echo "UNRESOLVED in $(basename "$exe"):"; ldd "$exe" | grep "not found"; bad=1
    fi
  done
  ldd "$B/bin/baton" | awk -v lib="$B/lib/" '$2 == "=>" { if (index($3, lib) == 1 || $3 ~ /\/bin\/\.\.\/lib\//) bundled++;
      else { other++; list = list " " $1 "=>" $3 } }
    END { printf "baton: %d libraries from the bundle, %d from the machine:%s\n", bundled, other, list }'
  [ $bad -eq 0 ] && echo "ldd: every library of every bundled executable resolves"
  return $bad
}
export -f env_step
run_step env 30 255 -- env_step

# -------------------------------------------------------------------------------------- b. tests
tests_step() {
  mkdir -p "$work/tests"
  $cpu_only && export BATON_TWIN_ON_CPU=1  # the kernel tests' plumbing, a CPU in the GPU's place
  local status=0 name filter
  while IFS=$'\t' read -r name filter; do
    [ -x "$B/bin/$name" ] || { echo "$name: listed in the manifest but missing"; status=1; continue; }
    echo "== $name ${filter:+(--gtest_filter=$filter)}"
    (cd "$B/bin" && ./"$name" --gtest_output="xml:$work/tests/$name.xml" ${filter:+--gtest_filter="$filter"} \
      --gtest_brief=1) || status=1
  done < <("$py" -c '
import json, sys
for t in json.load(open(sys.argv[1]))["tests"]:
    print(t["name"] + "\t" + t.get("filter", ""))' "$B/manifest.json")
  "$py" bench/gpu/summarize_checks.py --tests-only "$work/tests" $($cpu_only && echo --cpu-only) || status=1
  return $status
}
export -f tests_step
run_step tests 150 195 -- tests_step

# ------------------------------------------------------------------------------------- c. greedy
# Four runs at a time on the GPU machine (two CPU runs of half the cores each, two GPU runs).
if $cpu_only; then dev_a=cpu:1; dev_b=cpu:$nproc_all; jobs=2
else dev_a=cpu:$(( nproc_all > 1 ? nproc_all / 2 : 1 )); dev_b=cuda; jobs=4; fi
run_step greedy 150 135 -- "$py" bench/gpu/greedy_equivalence.py --baton "$B/bin/baton" --fixtures "$fixtures" \
  --family models/baton-tiny-code --out "$work/greedy" --a "$dev_a" --b "$dev_b" --jobs "$jobs" --run-timeout 100

# ------------------------------------------------------------------------------------- d. logits
family_prompt=$(seq -s, 1 24)  # the family target has no reference.json: a fixed 24-token prompt
logits_step() {
  local dev=cuda hf="" status=0
  $cpu_only && dev=cpu
  if $cpu_only; then "$py" -c 'import transformers' 2>/dev/null || hf=--no-hf; else hf=--require-hf; fi
  mapfile -t dirs < <("$py" -c 'import json, os, sys
for n in json.load(open(os.path.join(sys.argv[1], "manifest.json")))["fixtures"]:
    print(os.path.join(sys.argv[1], n))' "$fixtures")
  "$B/bin/dump_logits" --device "$dev" --out "$work/logits" "${dirs[@]}" || status=1
  "$B/bin/dump_logits" --device "$dev" --out "$work/logits" --prompt-tokens "$family_prompt" \
    models/baton-tiny-code/target || status=1
  "$py" bench/gpu/compare_hf_logits.py --logits-dir "$work/logits" --prompt-tokens "$family_prompt" $hf \
    --out "$work/logits/compare.json" "${dirs[@]}" models/baton-tiny-code/target || status=1
  return $status
}
export -f logits_step
export family_prompt
run_step logits 60 105 -- logits_step

# -------------------------------------------------------------------------------------- e. speed
speed_baton_step() {
  if $cpu_only; then  # the bench's plumbing on a tiny model: no figure of this run means anything
    "$B/bin/llama_decode_bench" --device cpu --small --copy-gib 0.25 --context 64 --warmup 2 --steps 10 \
      >"$work/speed/baton.json"
    local dt
    for dt in float32 bfloat16; do
      "$B/bin/llama_decode_bench" --device cpu --small --copy-gib 0.01 --context 256 --batches 4 --prefill 0 \
        --graphs on --warmup 1 --steps 3 --kv-cache-dtype $dt >"$work/speed/kv_$dt.json" || echo "kv $dt failed" >&2
    done
  else
    "$B/bin/llama_decode_bench" --batches 1,8,64 --context 512 --warmup 5 --steps 30 >"$work/speed/baton.json"
    # The tensor-core ceiling (torch's BF16 matmul), then prefill and decode with cuBLAS linear()
    # (--no-batch-invariant); figures for the summary, judged there against the ceilings.
    timeout 40 "$py" bench/gpu/tensor_core_peak.py >"$work/speed/tensor_core_peak.json" || echo "tensor_core_peak failed (exit $?)" >&2
    timeout 60 "$B/bin/llama_decode_bench" --no-batch-invariant --batches 1,8,64 --context 512 --graphs on \
      --warmup 3 --steps 20 >"$work/speed/baton_nbi.json" || echo "--no-batch-invariant bench failed (exit $?)" >&2
    # Batch 16 at context 4096, where the KV cache's bytes outweigh the weights': F32 against BF16
    # (figures for the summary; best effort, the check does not judge them).
    local dt
    for dt in float32 bfloat16; do
      timeout 45 "$B/bin/llama_decode_bench" --batches 16 --context 4096 --prefill 0 --graphs on --copy-gib 1 \
        --warmup 3 --steps 20 --kv-cache-dtype $dt >"$work/speed/kv_$dt.json" || echo "kv $dt failed (exit $?)" >&2
    done
    # linear() alone on the same shapes, per shape and row count, against the copy bandwidth
    # (for tuning; its figures go to the logs, the check does not judge them).
    if [ -x "$B/bin/cuda_gemm_bench" ]; then
      timeout 40 "$B/bin/cuda_gemm_bench" >"$work/speed/gemm.jsonl" 2>&1 || echo "cuda_gemm_bench failed (exit $?)" >&2
      tail -n 3 "$work/speed/gemm.jsonl" >&2
    fi
  fi
}
mkdir -p "$work/speed"
export -f speed_baton_step
run_step speed_baton 150 60 -- speed_baton_step

# The bundled family's neural proposers (DFlash, MTP, EAGLE-3; k = 4) against plain decoding in one
# process, greedy at batch 1 and 8 (bench/spec_bench): TPOT speedup and acceptance where a
# verification costs little more than a decode step. Fails if any request's tokens differ from
# plain decoding's.
spec_step() {
  local m=models/baton-tiny-code dev=cuda n=24 args=() s
  if $cpu_only; then dev=cpu; n=2; fi
  zcat bench/data/HumanEval.jsonl.gz >"$work/spec/humaneval.jsonl" || return 1
  for s in dflash mtp eagle3; do args+=(--spec "{\"method\":\"$s\",\"num_speculative_tokens\":4,\"model\":\"$m/$s\"}"); done
  "$B/bin/spec_bench" --device "$dev" --model "$m/target" --prompts "$work/spec/humaneval.jsonl" --num-prompts "$n" \
    --cases batch1_greedy,batch8_greedy "${args[@]}" >"$work/spec/spec.jsonl" || return 1
  "$py" - "$work/spec/spec.jsonl" <<'PY'
import json, sys
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    bad += r["token_mismatches"]
    print(f'{r["speculative_config"]["method"]:7s} {r["case"]:14s} speedup {r["speedup"]:.2f}  '
          f'mean acceptance length {r["mean_acceptance_length"]:.2f}  mismatches {r["token_mismatches"]}')
sys.exit(1 if bad else 0)
PY
}
mkdir -p "$work/spec"
export -f spec_step
run_step spec 90 120 -- spec_step
if $cpu_only; then
  say "speed_hf: skipped (CPU-only run)"; record speed_hf skipped 0 "CPU-only run"
else
  run_step speed_hf 120 0 -- "$py" bench/gpu/hf_decode_speed.py --mode eager --batches 1,8,64 --out "$work/speed/hf_eager.json"
  # torch.compile only with time to spare; best effort (a failure is reported, the check still passes).
  t=$(step_timeout 200 0)
  if [[ $skip != *",speed_hf_compile,"* ]] && [ "$t" -ge 90 ]; then
    say "speed_hf_compile: start (timeout ${t}s, optional)"
    s0=$(date +%s)
    timeout --kill-after=5 "$t" "$py" bench/gpu/hf_decode_speed.py --mode compile --batches 1,8,64 --out "$work/speed/hf_compile.json" \
      >"$work/speed_hf_compile.log" 2>&1
    rc=$?
    tail -n 5 "$work/speed_hf_compile.log" | sed 's/^/    /'
    [ $rc -eq 0 ] && st=pass || st=optional_fail
    say "speed_hf_compile: $st (exit $rc) in $(( $(date +%s) - s0 ))s"
    record speed_hf_compile "$st" $(( $(date +%s) - s0 )) "exit $rc"
  else
    record speed_hf_compile skipped 0 "not enough budget left (${t}s)"
  fi
fi

# ------------------------------------------------------------------------------------ f. summary
publish
say "done in $(( $(date +%s) - start ))s; results in $result_dir (summary.json, check.log, logs.tar.gz)"
"$py" bench/gpu/summarize_checks.py --work "$work" --out "$result_dir/summary.json" --budget "$budget" \
  --elapsed $(( $(date +%s) - start )) $($cpu_only && echo --cpu-only)
finish $?
