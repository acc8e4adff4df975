#!/usr/bin/env bash
# KV transfer throughput between two processes on this host, against ucx_perftest measured in the
# same run. Prints JSON lines:
#   {"bench":"kv_transfer",...}      ours (kv_transfer_bench): UCX large (1 MiB copies) and small
#                                    (4 KiB copies), gRPC large; 64 MiB per transfer, median of 5.
#                                    "path" says which UCX path carried it: "shm" (the receiver's
#                                    pools in UCX shared memory, as on a decode node) or "network".
#                                    Without UCX_TLS set, UCX runs twice: as is (shm) and with
#                                    UCX_TLS=tcp (network).
#   {"bench":"ucx_perftest",...}     ucp_put_bw at 1 MiB and 4 KiB, median of 3 runs, twice: without
#                                    endpoint error handling (UCX's best case: shared memory) and
#                                    with it (-e: tcp only on UCX 1.13, like our network path)
#   {"bench":"kv_transfer_ratio",...} ours / ucx_perftest per size and perftest mode;
#                                    "like_for_like" marks shm vs default and network vs -e
#
#   bench/run_kv_transfer_bench.sh [BUILD_DIR] [extra kv_transfer_bench flags]
#   UCX_TLS=tcp bench/run_kv_transfer_bench.sh   (everything over tcp)
#
# ucx_perftest puts one cache-resident buffer over and over; our transfers read 64 MiB of cold
# memory, so the shared-memory ratio is bounded by this host's memcpy bandwidth from DRAM.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
shift || true
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt install ucx-utils)" >&2; exit 1; }

ours=$(mktemp)
perf=$(mktemp)
trap 'rm -f "$ours" "$perf"' EXIT

"$build/bench/kv_transfer_bench" "$@" | tee "$ours"
if [ -z "${UCX_TLS:-}" ]; then
  UCX_TLS=tcp "$build/bench/kv_transfer_bench" --transport ucx "$@" | tee -a "$ours"
fi

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One ucp_put_bw run; prints the overall bandwidth in MB/s. The server accepts one client and
# exits; the client retries while the server is still coming up (bounded).
perftest_once() {
  local size=$1 iters=$2 warmup=$3; shift 3
  local port out attempt
  port=$(free_port)
  timeout 120 ucx_perftest -p "$port" "$@" >/dev/null 2>&1 &
  local server=$!
  for attempt in $(seq 1 50); do
    if out=$(timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t ucp_put_bw -s "$size" -n "$iters" -w "$warmup" -f "$@" 2>/dev/null); then
      break
    fi
    out=""
    sleep 0.1
  done
  wait "$server" || true
  [ -n "$out" ] || { echo "ucx_perftest failed (size $size)" >&2; return 1; }
  # -f prints: iterations, overhead p50/avg/overall (us), bandwidth avg/overall (MB/s), msg rate.
  echo "$out" | awk 'NF >= 8 { bw = $6 } END { print bw }'
}

# Large transfers move 1 GiB, small ones 512 MiB per run: enough to amortise the run's start-up
# and final flush (a run of 64 x 1 MiB is dominated by them). perftest re-sends ONE buffer, so at
# 1 MiB it copies between caches; the 64 MiB runs touch as much memory per put as one of our
# transfers (64 MiB of KV), which is the like-for-like floor for a transfer of that size.
for mode in error_handling default; do
  flags=()
  [ "$mode" = error_handling ] && flags=(-e)
  for spec in "1048576 1024 16" "4096 131072 1000" "67108864 16 2"; do
    read -r size iters warmup <<<"$spec"
    runs=()
    for rep in 1 2 3; do runs+=("$(perftest_once "$size" "$iters" "$warmup" "${flags[@]}")"); done
    median=$(printf '%s\n' "${runs[@]}" | sort -g | sed -n 2p)
    printf '{"bench":"ucx_perftest","test":"ucp_put_bw","mode":"%s","size":%s,"iters":%s,"runs_mbps":[%s],"mbps":%s,"ucx_tls":"%s"}\n' \
      "$mode" "$size" "$iters" "$(IFS=,; echo "${runs[*]}")" "$median" "${UCX_TLS:-default}" | tee -a "$perf"
  done
done

/usr/bin/python3 - "$ours" "$perf" <<'EOF'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]  # skip log lines
perf = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
like = {("shm", "default"), ("network", "error_handling")}
for o in ours:
    if o["transport"] != "ucx":
        continue
    for p in perf:
        # Against perftest's puts of our copy size, and of our whole transfer's size (as much
        # memory touched per put as one transfer: the floor for large transfers).
        if p["size"] not in (o["copy_bytes"], o["total_bytes"]):
            continue
        ratio = o["gbps"] * 1000 / p["mbps"] if p["mbps"] else None
        print(json.dumps({"bench": "kv_transfer_ratio", "case": o["case"], "size": o["copy_bytes"],
                          "perftest_size": p["size"], "path": o.get("path"), "perftest_mode": p["mode"],
                          "like_for_like": (o.get("path"), p["mode"]) in like,
                          "ours_gbps": round(o["gbps"], 3), "perftest_gbps": round(p["mbps"] / 1000, 3),
                          "ratio": round(ratio, 3) if ratio is not None else None,
                          "ours_ucx_tls": o["ucx_tls"], "perftest_ucx_tls": p["ucx_tls"]}))
EOF
