"""Greedy token ids of `baton generate` on two devices (CUDA vs CPU), with and without speculation.

What it is for
  Step "greedy" of bench/gpu/run_device_checks.sh:
      python3 bench/gpu/greedy_equivalence.py --baton BIN --fixtures DIR --family models/baton-tiny-code
          --out DIR [--a cpu:16] [--b cuda] [--jobs 2]
  For every model it runs `baton generate --model M --prompts-file F --json` once per (method,
  device) — all prompts of a model through one engine, greedy (the --prompts-file batch mode of
  cli/generate_batch.cc, whose per-prompt JSON lines carry `token_ids`) — and compares the ids:
    * device A vs device B for the same method (CUDA vs CPU on the GPU machine);
    * every speculative method vs plain greedy on the same device (lossless speculation).
  Models and methods:
    * the bundled family's target (models/baton-tiny-code/target): the 10 prompts and the
      speculative configs of tools/train/check_engine_greedy.py (PROMPTS, family_specs: ngram,
      suffix, draft_model, eagle3, mtp; k = 4), 64 new tokens, as ctest family_target_greedy runs;
      then the same again with a BF16 KV cache (--kv-cache-dtype bfloat16) on both devices;
    * every fixture of tools/fixtures (DIR/manifest.json): its reference.json prompt plus two
      prompts that repeat a motif (so n-gram and suffix find drafts), up to 16 new tokens, plain,
      ngram and suffix, and each speculative head of DIR/spec/reference.json on its target.
  A device is `cpu`, `cpu:THREADS` or `cuda[:N]`. --a cpu:1 --b cpu:2 compares two CPU runs: the
  plumbing check run_device_checks.sh --cpu-only does on a machine without a GPU.
  Writes OUT/greedy.json (per model and method: agree/disagree counts, first differences, mean
  acceptance lengths, errors), the prompts files and each run's stdout/stderr under OUT/runs/, and
  prints a table. Exit status 0 only when every run succeeded and every comparison agreed.

What it must not do
  Compare anything but token ids, retry a run, or skip a failing model or method (a failed run is
  reported as such, and the other runs go on).
"""

import argparse
import concurrent.futures as futures
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "train"))
from check_engine_greedy import PROMPTS, family_specs  # noqa: E402  (imports torch: both machines have it)

K = 4
FAMILY_MAX_TOKENS = 64
FIXTURE_MAX_TOKENS = 16


def device_flags(device):
    """'cpu:16' -> ['--device', 'cpu', '--threads', '16']; 'cuda:0' -> ['--device', 'cuda:0']."""
    if device.startswith("cpu"):
        threads = device.split(":", 1)[1] if ":" in device else str(os.cpu_count() or 1)
        return ["--device", "cpu", "--threads", threads]
    return ["--device", device]


def motif_prompts(reference_prompt, vocab, eos_ids, count=2, seed=23):
    """Prompts that repeat a short motif, so that n-gram and suffix speculation have matches."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        motif = [t for t in (rng.randrange(3, vocab) for _ in range(rng.randrange(3, 7))) if t not in eos_ids]
        prompt = (reference_prompt[:4] + motif * 6)[:28]
        out.append(prompt)
    return out


def family_jobs(family, max_tokens):
    """The family target with an F32 KV cache (the default), and with a BF16 one."""
    target = os.path.join(family, "target")
    prompts = [{"prompt": p} for p in PROMPTS]
    methods = {"plain": None}
    methods.update(family_specs(target, K))
    job = {"name": "baton-tiny-code/target", "model": target, "prompts": prompts, "max_tokens": max_tokens,
           "methods": methods}
    bf16 = dict(job, name="baton-tiny-code/target+bf16-kv", extra_args=["--kv-cache-dtype", "bfloat16"])
    return [job, bf16]


def fixture_jobs(fixtures):
    with open(os.path.join(fixtures, "manifest.json")) as f:
        names = json.load(f)["fixtures"]
    heads = []
    spec_ref = os.path.join(fixtures, "spec", "reference.json")
    if os.path.exists(spec_ref):
        with open(spec_ref) as f:
            heads = json.load(f)["heads"]
    jobs = []
    for name in names:
        d = os.path.join(fixtures, name)
        with open(os.path.join(d, "reference.json")) as f:
            ref = json.load(f)
        prompts = [ref["prompt_token_ids"]] + motif_prompts(ref["prompt_token_ids"], ref["vocab_size"],
                                                            set(ref["eos_token_ids"]))
        methods = {"plain": None,
                   "ngram": {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2,
                             "prompt_lookup_max": 5},
                   "suffix": {"method": "suffix", "num_speculative_tokens": K}}
        for h in heads:
            if h["target"] == name:
                methods[h["name"]] = {"method": h["method"], "num_speculative_tokens": K,
                                      "model": os.path.join(fixtures, "spec", h["name"])}
        jobs.append({"name": name, "model": d, "prompts": [{"prompt_tokens": p} for p in prompts],
                     "max_tokens": FIXTURE_MAX_TOKENS, "methods": methods})
    return jobs


def safe(name):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def run_one(baton, job, method, spec, device, out_dir, timeout):
    """One `baton generate --prompts-file` run: returns {'ids': [[...] per prompt], 'spec': ..., 'error': ...}."""
    runs = os.path.join(out_dir, "runs")
    stem = f"{safe(job['name'])}.{safe(method)}.{safe(device)}"
    prompts_file = os.path.join(runs, f"{safe(job['name'])}.prompts.jsonl")
    cmd = [baton, "generate", "--model", job["model"], "--prompts-file", prompts_file, "--json",
           "--max-tokens", str(job["max_tokens"])] + device_flags(device) + job.get("extra_args", [])
    if spec:
        cmd += ["--speculative-config", json.dumps(spec)]
    start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        tail = e.stderr or b""
        if isinstance(tail, bytes):
            tail = tail.decode("utf-8", "replace")
        return {"error": f"timed out after {timeout} s: {tail[-1500:]}", "cmd": " ".join(cmd)}
    seconds = time.time() - start
    with open(os.path.join(runs, stem + ".stdout"), "w") as f:
        f.write(p.stdout)
    with open(os.path.join(runs, stem + ".stderr"), "w") as f:
        f.write(p.stderr)
    result = {"seconds": round(seconds, 2), "cmd": " ".join(cmd)}
    if p.returncode != 0:
        result["error"] = f"exit {p.returncode}: {p.stderr.strip()[-1500:]}"
        return result
    ids = [None] * len(job["prompts"])
    try:
        for line in p.stdout.splitlines():
            j = json.loads(line)
            if j.get("summary"):
                result["spec"] = j.get("spec")
                result["backend"] = j.get("backend")
            else:
                ids[j["index"]] = j["token_ids"]
                if j.get("error"):
                    result.setdefault("request_errors", []).append(j["error"])
    except (ValueError, KeyError) as e:
        result["error"] = f"unreadable output: {e}"
        return result
    if any(x is None for x in ids):
        result["error"] = "missing prompts in the output"
    result["ids"] = ids
    return result


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def compare(ids_a, ids_b):
    agree, diffs = 0, []
    for i, (a, b) in enumerate(zip(ids_a, ids_b)):
        d = first_difference(a, b)
        if d is None:
            agree += 1
        else:
            diffs.append({"prompt": i, "position": d, "a": a[d:d + 4], "b": b[d:d + 4]})
    return agree, len(ids_a) - agree, diffs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baton", required=True)
    ap.add_argument("--fixtures", help="make_fixtures.py output directory (omit to skip the fixtures)")
    ap.add_argument("--family", help="the model family directory (omit to skip it)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--a", default="cpu", help="reference device (default cpu, all cores)")
    ap.add_argument("--b", default="cuda", help="device under test (default cuda)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2: one per device)")
    ap.add_argument("--run-timeout", type=int, default=120, help="seconds one baton run may take")
    ap.add_argument("--family-max-tokens", type=int, default=FAMILY_MAX_TOKENS)
    args = ap.parse_args(argv)
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)

    jobs = []
    if args.family:
        jobs += family_jobs(args.family, args.family_max_tokens)
    if args.fixtures:
        jobs += fixture_jobs(args.fixtures)
    for job in jobs:
        with open(os.path.join(args.out, "runs", f"{safe(job['name'])}.prompts.jsonl"), "w") as f:
            for p in job["prompts"]:
                f.write(json.dumps(p) + "\n")

    # Device A runs and device B runs interleave, so the CPU's cores and the GPU both stay busy.
    tasks = [(job, method, spec, dev) for job in jobs for method, spec in job["methods"].items()
             for dev in (args.a, args.b)]
    results = {}
    with futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        pending = {pool.submit(run_one, args.baton, job, method, spec, dev, args.out, args.run_timeout):
                   (job["name"], method, dev) for job, method, spec, dev in tasks}
        for f in futures.as_completed(pending):
            results[pending[f]] = f.result()

    report = {"devices": {"a": args.a, "b": args.b}, "k": K, "models": {}}
    ok = True
    rows = []
    for job in jobs:
        per_method = {}
        for method in job["methods"]:
            ra, rb = results[(job["name"], method, args.a)], results[(job["name"], method, args.b)]
            entry = {"prompts": len(job["prompts"])}
            errors = {d: r["error"] for d, r in ((args.a, ra), (args.b, rb)) if r.get("error")}
            if errors:
                entry["errors"] = errors
                ok = False
                rows.append((job["name"], method, "ERROR", "", "", ""))
                per_method[method] = entry
                continue
            agree, disagree, diffs = compare(ra["ids"], rb["ids"])
            entry.update({"agree": agree, "disagree": disagree})
            if diffs:
                entry["differences"] = diffs
            lossless = []
            if method != "plain":
                pa, pb = results[(job["name"], "plain", args.a)], results[(job["name"], "plain", args.b)]
                for dev, r, plain in ((args.a, ra, pa), (args.b, rb, pb)):
                    if plain.get("ids") is None:
                        continue
                    la, ld, ldiffs = compare(plain["ids"], r["ids"])
                    entry[f"vs_plain_on_{dev}"] = {"agree": la, "disagree": ld}
                    if ld:
                        entry[f"vs_plain_on_{dev}"]["differences"] = ldiffs
                        ok = False
                    lossless.append(f"{la}/{la + ld}")
                entry["mean_acceptance_length"] = {
                    d: (r.get("spec") or {}).get("mean_acceptance_length") for d, r in ((args.a, ra), (args.b, rb))}
            if disagree:
                ok = False
            mal = entry.get("mean_acceptance_length", {}).get(args.b)
            rows.append((job["name"], method, f"{agree}/{agree + disagree}", " ".join(lossless),
                         "" if mal is None else f"{mal:.2f}", f"{ra.get('seconds', 0):.1f}/{rb.get('seconds', 0):.1f}"))
            per_method[method] = entry
        report["models"][job["name"]] = per_method
    totals = {"runs": len(tasks), "comparisons": len(rows),
              "agreeing_comparisons": sum(1 for r in rows if r[2] != "ERROR" and r[2].split("/")[0] == r[2].split("/")[1]),
              "failed_runs": sum(1 for r in results.values() if r.get("error"))}
    report["totals"] = totals
    report["ok"] = ok
    with open(os.path.join(args.out, "greedy.json"), "w") as f:
        json.dump(report, f, indent=1)

    print(f"{'model':32s} {'method':30s} {args.a + ' vs ' + args.b:>14s} {'spec == plain (a b)':>20s} "
          f"{'accept':>7s} {'seconds a/b':>12s}")
    for r in rows:
        print(f"{r[0]:32s} {r[1]:30s} {r[2]:>14s} {r[3]:>20s} {r[4]:>7s} {r[5]:>12s}")
    print(json.dumps({"greedy_ok": ok, **totals}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
