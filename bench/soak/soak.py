#!/usr/bin/env python3
"""A chaos soak of a local disaggregated cluster: steady load while nodes are killed, frozen and
restarted, then a check that nothing hung, leaked or changed.

    bench/soak.sh [--minutes 30] [--bin-dir build/release] [--concurrency 6] [--seed 1] [--out DIR]

Starts 2 decode nodes, 2 prefill nodes (EAGLE-3 drafting, the bundled baton-tiny-code family) and a
router, each a process of its own on a loopback port, then for --minutes:
  - load: --concurrency client threads (the Python SDK over the router's gRPC API) each sending
    greedy requests back to back over a fixed prompt set; one request in ten is cancelled after its
    first message (the client leaves the stream);
  - chaos: every --fault-every-s seconds (30-60 by default) a random node is either killed
    (SIGKILL) and restarted on its port a few seconds later, or frozen (SIGSTOP) for --freeze-s
    seconds (20) and thawed.
Then the load stops, every node runs again, and the soak reports:
  finished      requests that finished with tokens
  errors        requests that ended with a clear error (a status code and a message)
  cancelled     requests the client cancelled on purpose
  hung          requests still without an answer after --request-timeout-s (must be 0)
  mismatches    finished greedy outputs that differ from a local run of the same prompt (must be 0)
  leaked        KV blocks used or reserved on any node once the load stopped and the leases ran out
  write_quarantines  per decode node: reservations that ended while their prefill node could still
                write them, and of those the ones reclaimed at the limit (since the node's last start)
                (baton_kv_cache_blocks on each node's /metrics; must be 0)
  rss_growth    per process that ran the whole soak, RSS at the end / RSS after warm-up
and writes them to OUT/summary.json. Exit status 0 only when hung, mismatches and leaked are 0 and
no process grew its RSS by more than --max-rss-growth (0.10).

Not covered: cutting the P->D network path (that needs a network namespace, i.e. privileges a
developer machine or CI runner does not give); SIGKILL and SIGSTOP of either end cover what such a
cut does to the two nodes' state.

Must not: leave a process behind (every child is killed on exit, also on Ctrl-C), or judge a run
by anything but the counts above.
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
from baton_client import BatonError, Client  # noqa: E402

FAMILY = os.path.join(REPO, "models", "baton-tiny-code")
PROMPTS = [
    "def fibonacci(n):",
    "class Stack:\n    def __init__(self):",
    "import os\n\ndef list_files(path):",
    "def is_prime(n):\n    \"\"\"Return True when n is prime.\"\"\"",
    "def merge_sort(items):",
    "# Read a CSV file and print the sum of its second column\n",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One cluster process, restartable on the same ports."""

    def __init__(self, name, argv, log_dir, metrics_port=None):
        self.name, self.argv, self.metrics_port = name, argv, metrics_port
        self.log_path = os.path.join(log_dir, name + ".log")
        self.popen = None
        self.frozen = False
        self.restarts = 0

    def start(self, ready_timeout=120):
        log = open(self.log_path, "a")
        self.popen = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log, text=True)
        deadline = time.time() + ready_timeout
        for line in self.popen.stdout:  # "... ready on HOST:PORT" is each binary's last start-up line
            log.write(line)
            log.flush()
            if " ready on " in line:
                threading.Thread(target=self._drain, args=(log,), daemon=True).start()
                return
            if time.time() > deadline:
                break
        raise RuntimeError(f"{self.name} did not start; see {self.log_path}")

    def _drain(self, log):
        for line in self.popen.stdout:
            log.write(line)
        log.flush()

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.popen.pid, sig)

    def kill(self):
        self.thaw()
        self.signal(signal.SIGKILL)
        if self.popen:
            self.popen.wait(timeout=30)

    def freeze(self):
        self.signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self):
        if self.frozen:
            self.signal(signal.SIGCONT)
            self.frozen = False

    def rss_kib(self):
        try:
            with open(f"/proc/{self.popen.pid}/status") as f:
                return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        except (OSError, AttributeError):
            return None

    def kv_held(self):
        """Blocks used or reserved, summed over the node's pools (from its /metrics)."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        held = 0
        for m in re.finditer(r'^baton_kv_cache_blocks\{([^}]*)\}\s+([0-9.e+-]+)$', text, re.M):
            if re.search(r'state="(used|reserved)"', m.group(1)):
                held += int(float(m.group(2)))
        return held

    def counter(self, name):
        """A counter's value from the node's /metrics (since its last start); 0 when absent."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        return sum(int(float(m.group(1))) for m in re.finditer(rf'^{name}(?:{{[^}}]*}})?\s+([0-9.e+-]+)$', text, re.M))


def kill_on_exit(procs):
    """Kills every process on Ctrl-C too; returns the function that kills them (call it at the end)."""
    def cleanup(*_):
        for p in procs:
            try:
                p.kill()
            except Exception:  # noqa: BLE001 (best effort on the way out)
                pass

    signal.signal(signal.SIGINT, lambda *a: (cleanup(), sys.exit(130)))
    return cleanup


def reference_outputs(bin_dir, max_tokens, out_dir):
    """Greedy token ids of each prompt from a local engine (no cluster, no speculation)."""
    prompts_file = os.path.join(out_dir, "prompts.jsonl")
    with open(prompts_file, "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p}) + "\n")
    out = subprocess.run([os.path.join(bin_dir, "cli", "baton"), "generate", "--model", os.path.join(FAMILY, "target"),
                          "--prompts-file", prompts_file, "--json", "--max-tokens", str(max_tokens)],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    ids = {}
    for line in out.splitlines():
        j = json.loads(line)
        if "index" in j:
            ids[j["index"]] = j["token_ids"]
    return [ids[i] for i in range(len(PROMPTS))]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"finished": 0, "errors": 0, "cancelled": 0, "hung": 0, "mismatches": 0}
        self.error_kinds = {}
        self.examples = []

    def add(self, key, detail=None):
        with self.lock:
            self.counts[key] += 1
            if key == "errors" and detail:
                kind = detail.split(":")[0]
                self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
            if detail and len(self.examples) < 20 and key in ("hung", "mismatches"):
                self.examples.append(f"{key}: {detail}")


def load_worker(router, expected, max_tokens, timeout_s, stop, tally, rng):
    client = Client(router, timeout=timeout_s)
    i = rng.randrange(len(PROMPTS))
    while not stop.is_set():
        i = (i + 1) % len(PROMPTS)
        cancel = rng.random() < 0.1
        ids, finish = [], None
        try:
            for d in client.stream(PROMPTS[i], max_tokens=max_tokens, temperature=0):
                ids.extend(d.token_ids)
                finish = d.finish_reason or finish
                if cancel:
                    break  # leaving the stream cancels the request
            if cancel:
                tally.add("cancelled")
            elif finish == "error":
                tally.add("errors", "FINISH_ERROR: the stream ended with finish_reason error")
            elif ids != expected[i]:
                tally.add("mismatches", f"prompt {i}: {ids[:12]}... vs {expected[i][:12]}...")
            else:
                tally.add("finished")
        except BatonError as e:
            code = getattr(e, "code_name", "UNKNOWN")
            if code == "DEADLINE_EXCEEDED" and "request-timeout" not in str(e):
                tally.add("hung", f"prompt {i}: no answer within {timeout_s} s")
            else:
                tally.add("errors", f"{code}: {e}")
    client.close()


def chaos(nodes, stop, rng, fault_every, freeze_s, events):
    while not stop.wait(rng.uniform(*fault_every)):
        node = rng.choice(nodes)
        if rng.random() < 0.5:
            events.append(f"{time.strftime('%H:%M:%S')} kill -9 {node.name}")
            node.kill()
            if stop.wait(rng.uniform(2, 5)):
                node.start()
                break
            node.start()
            node.restarts += 1
            events.append(f"{time.strftime('%H:%M:%S')} restarted {node.name}")
        else:
            events.append(f"{time.strftime('%H:%M:%S')} SIGSTOP {node.name} for {freeze_s} s")
            node.freeze()
            stop.wait(freeze_s)
            node.thaw()
            events.append(f"{time.strftime('%H:%M:%S')} SIGCONT {node.name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "release"))
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--fault-every-s", default="30,60", help="seconds between faults: MIN,MAX")
    ap.add_argument("--freeze-s", type=float, default=20)
    ap.add_argument("--request-timeout-s", type=float, default=120)
    ap.add_argument("--max-rss-growth", type=float, default=0.10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = args.out or f"/tmp/baton-soak-{int(time.time())}"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(args.seed)
    fault_every = tuple(float(x) for x in args.fault_every_s.split(","))
    b = args.bin_dir
    model = os.path.join(FAMILY, "target")
    spec = json.dumps({"method": "eagle3", "model": os.path.join(FAMILY, "eagle3"), "num_speculative_tokens": 4})
    common = ["--model", model, "--host", "127.0.0.1", "--threads", "1", "--insecure", "--kv-cache-memory", "0.25",
              "--handoff-lease-ms", "10000"]

    print(f"soak: reference outputs from a local engine ({len(PROMPTS)} prompts)", flush=True)
    expected = reference_outputs(b, args.max_tokens, out)

    nodes, procs = [], []
    for i in range(2):
        port, mport = free_port(), free_port()
        nodes.append(Proc(f"decode-{i}", [os.path.join(b, "decode_node", "baton-decode")] + common +
                          ["--port", str(port), "--metrics-port", str(mport), "--speculative-config", spec,
                           "--transport", "ucx,grpc"], out, mport))
        nodes[-1].port = port
    p_spec = json.dumps({"method": "eagle3", "model": os.path.join(FAMILY, "eagle3"), "num_speculative_tokens": 1})
    for i in range(2):
        port, mport = free_port(), free_port()
        nodes.append(Proc(f"prefill-{i}", [os.path.join(b, "prefill_node", "baton-prefill")] + common +
                          ["--port", str(port), "--metrics-port", str(mport), "--speculative-config", p_spec],
                          out, mport))
        nodes[-1].port = port
    router_port = free_port()
    router_argv = [os.path.join(b, "router", "baton-router"), "--model", model, "--host", "127.0.0.1", "--port",
                   str(router_port), "--insecure", "--stream-progress-timeout-ms", "10000"]
    for n in nodes:
        router_argv += ["--" + n.name.split("-")[0], f"127.0.0.1:{n.port}"]
    router = Proc("router", router_argv, out)
    procs = nodes + [router]

    cleanup = kill_on_exit(procs)
    summary = {}
    try:
        for p in procs:
            p.start()
        target = f"127.0.0.1:{router_port}"
        with Client(target, timeout=30) as c:
            deadline = time.time() + 60
            while True:
                info = c.model_info()
                if info.num_prefill_nodes == 2 and info.num_decode_nodes == 2:
                    break
                if time.time() > deadline:
                    raise RuntimeError(f"the router never saw all four nodes usable: {info}")
                time.sleep(0.2)
        print(f"soak: cluster up (logs in {out}); load x{args.concurrency} for {args.minutes} min with faults",
              flush=True)
        tally, stop, events = Tally(), threading.Event(), []
        workers = [threading.Thread(target=load_worker, args=(target, expected, args.max_tokens, args.request_timeout_s,
                                                               stop, tally, random.Random(args.seed * 100 + k)))
                   for k in range(args.concurrency)]
        for w in workers:
            w.start()
        time.sleep(min(20.0, args.minutes * 6))  # warm-up before the RSS baseline
        rss_start = {p.name: p.rss_kib() for p in procs}
        restarts_start = {p.name: p.restarts for p in procs}
        chaos_stop = threading.Event()
        chaos_thread = threading.Thread(target=chaos, args=(nodes, chaos_stop, rng, fault_every, args.freeze_s, events))
        chaos_thread.start()
        end = time.time() + args.minutes * 60
        while time.time() < end:
            time.sleep(5)
            with tally.lock:
                print(f"soak: {time.strftime('%H:%M:%S')} {tally.counts} faults {len(events)}", flush=True)
        chaos_stop.set()
        chaos_thread.join()
        stop.set()
        for w in workers:
            w.join(timeout=args.request_timeout_s + 30)
        hung_threads = sum(w.is_alive() for w in workers)
        for n in nodes:
            n.thaw()
            if not n.alive():
                n.start()
        rss_end = {p.name: p.rss_kib() for p in procs}
        # Leases run out after --handoff-lease-ms (10 s): then nothing may stay held.
        leak_deadline, leaked = time.time() + 60, None
        while time.time() < leak_deadline:
            leaked = {n.name: n.kv_held() for n in nodes}
            if not any(leaked.values()):
                break
            time.sleep(1)
        # Reservations ended while a prefill node could still write them (kept out of use until it was
        # done); counted since each decode node's last restart.
        quarantines = {n.name: (n.counter("baton_kv_write_quarantines_total"),
                                n.counter("baton_kv_write_quarantines_expired_total"))
                       for n in nodes if n.name.startswith("decode")}
        growth = {}
        for p in procs:
            if p.restarts == restarts_start[p.name] and rss_start.get(p.name) and rss_end.get(p.name):
                growth[p.name] = round(rss_end[p.name] / rss_start[p.name] - 1, 3)
        summary = dict(tally.counts, hung=tally.counts["hung"] + hung_threads, leaked=sum(leaked.values()),
                       leaked_by_node=leaked, write_quarantines=quarantines, rss_growth=growth, error_kinds=tally.error_kinds, faults=events,
                       examples=tally.examples, minutes=args.minutes, concurrency=args.concurrency)
    finally:
        cleanup()
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    ok = (summary.get("hung", 1) == 0 and summary.get("mismatches", 1) == 0 and summary.get("leaked", 1) == 0
          and all(g <= args.max_rss_growth for g in summary.get("rss_growth", {}).values()))
    print(json.dumps({k: v for k, v in summary.items() if k not in ("faults", "examples")}))
    print(f"soak: {'PASS' if ok else 'FAIL'}; faults: {len(summary.get('faults', []))}; summary in {out}/summary.json")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
