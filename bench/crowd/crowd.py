#!/usr/bin/env python3
"""The router under a crowd: many concurrent streams, then many idle and slow connections, with
the router's threads, memory and responsiveness measured throughout.

    bench/crowd.sh [--streams 1000] [--rounds 2] [--idle 10000] [--slow 64] [--bin-dir build/release] [--out DIR]

Starts a router (gRPC and HTTP), one prefill node and one decode node on loopback ports (the
bundled baton-tiny-code model, no speculation: the router is what is measured, not the engine),
then:
  streams  --rounds rounds of --streams streaming requests opened at once, half over gRPC (the
           Python SDK's AsyncClient) and half over HTTP (/v1/completions with "stream": true, SSE),
           each greedy with --max-tokens. Every request must finish with tokens. Sampled every
           50 ms: the router's threads (/proc/PID/status), its RSS, and baton_router_requests_running
           (the streams it holds at once, from its /metrics).
  idle     --idle HTTP connections that each make one GET /live and then stay open, idle
           (keep-alive), and --slow clients that send a request's header one line every 3 s; then,
           with all of them open, the time a new GET /health and a new completion (HTTP and gRPC,
           max_tokens 1) take to be answered.
It prints one JSON object (also OUT/summary.json) with the figures and the checks the router is
held to:
  all_finished        every stream of every round finished with tokens
  peak_streams        the most requests the router held at once (should reach --streams)
  peak_threads        the router's most threads at once; target < 64
  rss_growth          RSS at the end of the last round / at the end of the first (warm-up); target < 1.10
  health_ms, completion_ms, grpc_ms   with the idle and slow connections open; target < 1000 each
and exits 0 only when every target holds.

Must not: leave a process behind (every child is killed on exit, also on Ctrl-C).
"""
import argparse
import asyncio
import json
import os
import re
import resource
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
sys.path.insert(0, os.path.join(REPO, "bench", "soak"))
from baton_client import AsyncClient  # noqa: E402
from soak import FAMILY, PROMPTS, Proc, free_port, kill_on_exit  # noqa: E402


def router_sample(pid, metrics_port):
    """(threads, rss_kib, requests_running) of the router now; None for what cannot be read."""
    threads = rss = running = None
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
        rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    except (OSError, AttributeError):
        pass
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).read().decode()
        m = re.search(r"^baton_router_requests_running(?:\{[^}]*\})?\s+([0-9.e+-]+)$", text, re.M)
        running = int(float(m.group(1))) if m else None
    except OSError:
        pass
    return threads, rss, running


class Sampler:
    """Samples the router every 50 ms on a thread of its own, keeping the peaks."""

    def __init__(self, pid, metrics_port):
        self.pid, self.metrics_port = pid, metrics_port
        self.peak_threads = self.peak_running = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.05):
            threads, _, running = router_sample(self.pid, self.metrics_port)
            self.peak_threads = max(self.peak_threads, threads or 0)
            self.peak_running = max(self.peak_running, running or 0)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


async def http_stream(port, prompt, max_tokens):
    """One streamed /v1/completions over its own connection: the number of tokens' text events."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        body = json.dumps({"model": "target", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                           "stream": True}).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: crowd\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            rest = await reader.read(2000)
            raise RuntimeError(f"HTTP {status.decode().strip()}: {rest[-300:]!r}")
        events, done = 0, False
        while True:
            line = await reader.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                if line.strip() == b"data: [DONE]":
                    done = True
                    break
                if b'"error"' in line:
                    raise RuntimeError(f"error event: {line[:300]!r}")
                events += 1
        if not done:
            raise RuntimeError("the stream ended without [DONE]")
        return events
    finally:
        writer.close()


async def grpc_stream(client, prompt, max_tokens):
    tokens = 0
    async for d in client.stream(prompt, max_tokens=max_tokens, temperature=0):
        tokens += len(d.token_ids)
    return tokens


async def streams_round(n, grpc_target, http_port, max_tokens, timeout_s, mix="both"):
    """n streams at once, half gRPC (over 8 channels) and half HTTP (--mix: or all of one kind);
    returns (finished, a few errors, the number of errors)."""
    clients = [AsyncClient(grpc_target, timeout=timeout_s) for _ in range(8)]
    try:
        tasks = []
        for i in range(n):
            prompt = PROMPTS[i % len(PROMPTS)]
            if mix == "grpc" or (mix == "both" and i % 2 == 0):
                tasks.append(grpc_stream(clients[(i // 2) % len(clients)], prompt, max_tokens))
            else:
                tasks.append(http_stream(http_port, prompt, max_tokens))
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout_s)
    finally:
        for c in clients:
            await c.close()
    errors = [r for r in results if isinstance(r, BaseException) or r == 0]
    return n - len(errors), [repr(e)[:300] for e in errors[:5]], len(errors)


async def timed_http(port, request):
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 30)
    await reader.read()
    writer.close()
    return (time.perf_counter() - t0) * 1000, status.decode().strip()


async def idle_phase(http_port, grpc_target, idle, slow):
    """Opens the idle and slow connections, then times new requests while they are open."""
    idle_conns, slow_conns = [], []

    async def open_idle():
        reader, writer = await asyncio.open_connection("127.0.0.1", http_port)
        writer.write(b"GET /live HTTP/1.1\r\nHost: crowd\r\n\r\n")
        await writer.drain()
        status = await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass  # the header; /live's body is read with the next request's, which never comes
        idle_conns.append((reader, writer, status))

    async def open_slow():
        reader, writer = await asyncio.open_connection("127.0.0.1", http_port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\n")
        await writer.drain()
        slow_conns.append((reader, writer))

    t0 = time.perf_counter()
    batch = 500
    for start in range(0, idle, batch):
        await asyncio.gather(*(open_idle() for _ in range(min(batch, idle - start))), return_exceptions=True)
    await asyncio.gather(*(open_slow() for _ in range(slow)), return_exceptions=True)
    opened_s = time.perf_counter() - t0
    live_ok = sum(1 for _, _, s in idle_conns if b" 200 " in s)

    stop = asyncio.Event()

    async def trickle():
        i = 0
        while not stop.is_set():
            for _, w in slow_conns:
                try:
                    w.write(f"X-Slow-{i}: {i}\r\n".encode())
                except (ConnectionError, RuntimeError):
                    pass
            i += 1
            try:
                await asyncio.wait_for(stop.wait(), 3)
            except asyncio.TimeoutError:
                pass

    trickler = asyncio.create_task(trickle())
    health_ms, health_status = await timed_http(http_port, b"GET /health HTTP/1.1\r\nHost: crowd\r\nConnection: close\r\n\r\n")
    body = json.dumps({"model": "target", "prompt": PROMPTS[0], "max_tokens": 1, "temperature": 0}).encode()
    completion_ms, completion_status = await timed_http(
        http_port, b"POST /v1/completions HTTP/1.1\r\nHost: crowd\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    async with AsyncClient(grpc_target, timeout=30) as c:
        t0 = time.perf_counter()
        result = await c.generate(PROMPTS[1], max_tokens=1, temperature=0)
        grpc_ms = (time.perf_counter() - t0) * 1000
    still_open = sum(1 for _, w, _ in idle_conns if not w.is_closing())
    stop.set()
    await trickler
    for _, w, _ in idle_conns:
        w.close()
    for _, w in slow_conns:
        w.close()
    return {"idle_opened": len(idle_conns), "idle_live_ok": live_ok, "idle_still_open": still_open,
            "slow_opened": len(slow_conns), "open_seconds": round(opened_s, 2),
            "health_ms": round(health_ms, 1), "health_status": health_status,
            "completion_ms": round(completion_ms, 1), "completion_status": completion_status,
            "grpc_ms": round(grpc_ms, 1), "grpc_tokens": len(result.token_ids)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--mix", choices=["both", "grpc", "http"], default="both", help="the streams' APIs")
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--slow", type=int, default=64)
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "release"))
    ap.add_argument("--router-bin", default=None, help="the router binary (default: BIN_DIR/router/baton-router), "
                    "e.g. an AddressSanitizer build's")
    ap.add_argument("--router-log-level", default="info")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = args.out or f"/tmp/baton-crowd-{int(time.time())}"
    os.makedirs(out, exist_ok=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.idle + args.slow + args.streams + 1024
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, want), hard))

    b = args.bin_dir
    model = os.path.join(FAMILY, "target")
    common = ["--model", model, "--host", "127.0.0.1", "--threads", "1", "--insecure", "--kv-cache-memory", "0.5"]
    d_port, p_port = free_port(), free_port()
    decode = Proc("decode", [os.path.join(b, "decode_node", "baton-decode")] + common +
                  ["--port", str(d_port), "--max-num-seqs", "256"], out)
    prefill = Proc("prefill", [os.path.join(b, "prefill_node", "baton-prefill")] + common + ["--port", str(p_port)], out)
    r_port, http_port, metrics_port = free_port(), free_port(), free_port()
    router = Proc("router", [args.router_bin or os.path.join(b, "router", "baton-router"), "--model", model, "--host", "127.0.0.1",
                             "--port", str(r_port), "--http-port", str(http_port), "--metrics-port", str(metrics_port),
                             "--insecure", "--log-level", args.router_log_level, "--decode", f"127.0.0.1:{d_port}", "--prefill", f"127.0.0.1:{p_port}",
                             "--max-running-requests", str(args.streams + 64), "--max-queued-requests", "0",
                             "--max-http-connections", str(args.idle + args.slow + args.streams + 256)], out)
    procs = [decode, prefill, router]

    cleanup = kill_on_exit(procs)
    summary = {"streams": args.streams, "rounds": args.rounds, "idle": args.idle, "slow": args.slow}
    try:
        for p in procs:
            p.start()
        target = f"127.0.0.1:{r_port}"
        threads0, rss0, _ = router_sample(router.popen.pid, metrics_port)
        summary["threads_at_start"] = threads0
        print(f"crowd: cluster up (logs in {out}); router has {threads0} threads, RSS {rss0} KiB", flush=True)
        round_rss, all_finished, peak_threads, peak_streams = [], True, 0, 0
        for r in range(args.rounds):
            with Sampler(router.popen.pid, metrics_port) as s:
                t0 = time.perf_counter()
                finished, examples, errors = asyncio.run(
                    streams_round(args.streams, target, http_port, args.max_tokens, args.timeout_s, args.mix))
                seconds = time.perf_counter() - t0
            _, rss, _ = router_sample(router.popen.pid, metrics_port)
            round_rss.append(rss)
            all_finished &= errors == 0
            peak_threads, peak_streams = max(peak_threads, s.peak_threads), max(peak_streams, s.peak_running)
            print(f"crowd: round {r + 1}: {finished}/{args.streams} finished in {seconds:.1f} s; router peak "
                  f"{s.peak_threads} threads, {s.peak_running} requests at once; RSS {rss} KiB"
                  + (f"; errors e.g. {examples}" if errors else ""), flush=True)
        summary.update({"all_finished": all_finished, "peak_threads": peak_threads, "peak_streams": peak_streams,
                        "rss_kib_by_round": round_rss,
                        "rss_growth": round(round_rss[-1] / round_rss[0], 3) if round_rss and round_rss[0] else None})
        with Sampler(router.popen.pid, metrics_port) as s:
            summary.update(asyncio.run(idle_phase(http_port, target, args.idle, args.slow)))
        summary["idle_peak_threads"] = s.peak_threads
        print(f"crowd: {summary['idle_opened']} idle + {summary['slow_opened']} slow connections open: /health in "
              f"{summary['health_ms']} ms, a completion in {summary['completion_ms']} ms (HTTP) and "
              f"{summary['grpc_ms']} ms (gRPC); router peak {s.peak_threads} threads", flush=True)
    finally:
        cleanup()
    checks = {
        "all_finished": summary.get("all_finished") is True,
        "peak_threads_below_64": max(summary.get("peak_threads", 1 << 30), summary.get("idle_peak_threads", 0)) < 64,
        "rss_growth_below_1.10": (summary.get("rss_growth") or 99) < 1.10,
        "health_below_1s": summary.get("health_ms", 1e9) < 1000 and " 200 " in summary.get("health_status", ""),
        "completion_below_1s": summary.get("completion_ms", 1e9) < 1000 and " 200 " in summary.get("completion_status", ""),
        "grpc_below_1s": summary.get("grpc_ms", 1e9) < 1000,
    }
    summary["checks"] = checks
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
