#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, the `fuzz` CMake preset: clang 14, ASan + UBSan) and runs
# each for a while on a copy of its seed corpus (docs/fuzzing.md).
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [--merge] [--keep-going] [NAME...]
#
#   NAME          harnesses to run (default: all of fuzz/*_fuzzer.cc), e.g. openai_request tokenizer
#   --seconds N   fuzzing time per harness (default 30)
#   --jobs J      harnesses run at once (default 1); each is one process on one core
#   --merge       afterwards, merge the inputs that found new coverage into fuzz/corpus/NAME
#                 (libFuzzer -merge=1; without it the tree is never written)
#   --keep-going  libFuzzer's fork mode: record a crash, timeout or OOM and go on fuzzing (for long
#                 runs against known findings); the result still counts them
#
# Prints, per harness, one line of key=value pairs:
#   fuzz: name=NAME seconds=N execs=E cov=C ft=F corpus=UNITS corpus_files=N corpus_bytes=B new_units=U
#         peak_rss_mb=M [oom/timeout/crash=A/B/C] result=R
# result is ok, crash, leak, timeout, oom or error (the fuzzer did not run); reproducers are kept
# under build/fuzz/findings/NAME/ with the command that reruns each. Exits non-zero when any result
# is not ok. BATON_JOBS sets the build's parallelism (default: all cores); the environment's nice
# level carries over (`nice -n 19 scripts/fuzz.sh ...`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

seconds=30
jobs=1
merge=false
keep_going=false
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --merge) merge=true; shift ;;
    --keep-going) keep_going=true; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "fuzz.sh: --seconds takes a positive integer" >&2; exit 2; }
[[ "$jobs" =~ ^[0-9]+$ && "$jobs" -gt 0 ]] || { echo "fuzz.sh: --jobs takes a positive integer" >&2; exit 2; }

all=()
for f in fuzz/*_fuzzer.cc; do
  n=$(basename "$f" _fuzzer.cc)
  all+=("$n")
done
[ ${#names[@]} -eq 0 ] && names=("${all[@]}")
for n in "${names[@]}"; do
  [ -f "fuzz/${n}_fuzzer.cc" ] || { echo "fuzz.sh: no harness '$n' (have: ${all[*]})" >&2; exit 2; }
done

# Per harness: -max_len (bytes), -timeout (seconds per input), -rss_limit_mb, and ASan's
# malloc_context_size. Inputs are parsed in micro- to milliseconds; the timeouts leave room for a
# loaded machine. The tokenizer and chat-template harnesses cap their own input at -max_len.
# malloc_context_size=0 for the protobuf harnesses: protobuf's recursive parser gives allocations
# ever new call stacks, and ASan keeps every one, so with stacks recorded their RSS grows by ~200
# bytes per input until -rss_limit_mb reports an out-of-memory with a live heap of a few MB (rerun
# a reproducer without the option to see allocation stacks).
limits() {
  case "$1" in
    openai_request) echo "4096 10 2560 30" ;;
    convert)        echo "4096 10 2560 0" ;;
    spec_config)    echo "1024 10 2560 30" ;;
    tokenizer)      echo "16384 20 2560 30" ;;
    chat_template)  echo "8192 10 2560 30" ;;
    safetensors)    echo "4096 10 2560 30" ;;
    ucx_descriptor) echo "1024 10 2560 30" ;;
    kv_link)        echo "4096 10 2560 0" ;;
    *)              echo "4096 10 2560 30" ;;
  esac
}

# clang 14, libFuzzer's runtime and llvm-symbolizer come from Debian (scripts/install-deps.sh).
bash scripts/install-deps.sh
build_start=$(date +%s)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${BATON_JOBS:-$(nproc)}"
echo "fuzz.sh: build took $(( $(date +%s) - build_start )) s"

work=$(mktemp -d "${TMPDIR:-/tmp}/baton-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
findings_root="$root/build/fuzz/findings"
mkdir -p "$findings_root"

asan_options="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

# Total bytes of the files under a directory (du would count the directory's own blocks too).
bytes_of() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }

# Runs one harness; writes its summary line to $work/NAME.summary.
run_one() {
  local name=$1
  local bin="$root/build/fuzz/fuzz/${name}_fuzzer"
  local dir="$work/$name"
  local findings="$findings_root/$name"
  mkdir -p "$dir/corpus" "$dir/tmp" "$findings"
  cp -r "fuzz/corpus/$name/." "$dir/corpus/"
  touch "$dir/start"
  local max_len timeout rss context
  read -r max_len timeout rss context <<<"$(limits "$name")"
  export ASAN_OPTIONS="malloc_context_size=$context:$asan_options"
  local args=(-max_total_time="$seconds" -max_len="$max_len" -timeout="$timeout" -rss_limit_mb="$rss"
              -print_final_stats=1 -artifact_prefix="$findings/")
  [ -f "fuzz/dict/$name.dict" ] && args+=(-dict="$root/fuzz/dict/$name.dict")
  $keep_going && args+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  local status=0
  # The outer timeout only guards against a fuzzer that stops answering; libFuzzer ends on its own.
  (cd "$dir" && TMPDIR="$dir/tmp" timeout --kill-after=30 $((seconds + 300)) "$bin" "${args[@]}" "$dir/corpus") \
    >"$dir/log" 2>&1 || status=$?
  cp "$dir/log" "$findings_root/$name.log"

  local log="$dir/log"
  local last execs cov ft corp corp_bytes new_units peak_rss result
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  execs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  [ -n "$execs" ] || execs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")
  cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || true)
  ft=$(grep -oE 'ft: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || true)
  # corpus: libFuzzer's units at the end; corpus_files/corpus_bytes: what its corpus directory holds
  # (the seeds plus every input it kept), i.e. what --merge would choose from.
  corp=$(grep -oE 'corp: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || true)
  local corp_files corp_bytes
  corp_files=$(find "$dir/corpus" -type f | wc -l)
  corp_bytes=$(bytes_of "$dir/corpus")
  new_units=$(grep -m1 -oE 'stat::new_units_added: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  peak_rss=$(grep -m1 -oE 'stat::peak_rss_mb: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  # Fork mode counts its findings on every status line.
  local forked=""
  forked=$(grep -oE 'oom/timeout/crash: [0-9]+/[0-9]+/[0-9]+' <<<"$last" | cut -d' ' -f2 || true)
  local artifacts
  artifacts=$(find "$findings" -maxdepth 1 -type f -newer "$dir/start" | sort)
  if grep -q 'ERROR: LeakSanitizer' "$log"; then result=leak
  elif grep -qE 'ERROR: libFuzzer: timeout' "$log" || [[ "$forked" =~ ^[0-9]+/[1-9] ]]; then result=timeout
  elif grep -qE 'ERROR: libFuzzer: (out-of-memory|malloc)' "$log" || [[ "$forked" =~ ^[1-9] ]]; then result=oom
  elif grep -qE 'ERROR: (AddressSanitizer|libFuzzer: deadly signal|UndefinedBehaviorSanitizer)|runtime error:' "$log" ||
       [[ "$forked" =~ /[1-9][0-9]*$ ]] || [ -n "$artifacts" ]; then result=crash
  elif [ "$status" -ne 0 ] || [ -z "$execs" ]; then result=error
  else result=ok
  fi
  {
    echo "fuzz: name=$name seconds=$seconds execs=${execs:-0} cov=${cov:-0} ft=${ft:-0} corpus=${corp:-0}" \
         "corpus_files=$corp_files corpus_bytes=$corp_bytes new_units=${new_units:-0} peak_rss_mb=${peak_rss:-0}" \
         "${forked:+oom/timeout/crash=$forked }result=$result"
    if [ "$result" != ok ]; then
      echo "  log: build/fuzz/findings/$name.log"
      for a in $artifacts; do
        echo "  reproducer: ${a#"$root/"}"
        echo "    rerun: build/fuzz/fuzz/${name}_fuzzer ${a#"$root/"}"
      done
    fi
  } >"$dir/summary"
  cat "$dir/summary"

  if $merge; then
    # New inputs that cover new edges go into the tree's corpus, named by their SHA-1, smallest first.
    # -use_counters=0: edges only, not libFuzzer's hit-count features (which would add ten times
    # the files for the same coverage).
    (cd "$dir" && TMPDIR="$dir/tmp" "$bin" -merge=1 -use_counters=0 -max_len="$max_len" -timeout="$timeout" \
       -rss_limit_mb="$rss" "$root/fuzz/corpus/$name" "$dir/corpus" >"$dir/merge.log" 2>&1) ||
      echo "  merge failed: see $dir/merge.log" >>"$dir/summary"
    echo "  merged: fuzz/corpus/$name now $(find "fuzz/corpus/$name" -type f | wc -l) files," \
         "$(bytes_of "fuzz/corpus/$name") bytes" | tee -a "$dir/summary"
  fi
}

run_start=$(date +%s)
running=0
for n in "${names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$n" &
  running=$((running + 1))
done
wait || true
echo "fuzz.sh: running took $(( $(date +%s) - run_start )) s"

failed=0
echo "fuzz.sh: summary"
for n in "${names[@]}"; do
  if [ -f "$work/$n/summary" ]; then
    head -n 1 "$work/$n/summary"
    grep -q 'result=ok$' "$work/$n/summary" || failed=1
  else
    echo "fuzz: name=$n result=error"
    failed=1
  fi
done
if $merge; then
  echo "fuzz.sh: fuzz/corpus holds $(bytes_of fuzz/corpus) bytes (keep it under 1 MiB)"
fi
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: findings above (reproducers in build/fuzz/findings/; docs/fuzzing.md says what to do with them)" >&2
  exit 1
fi
