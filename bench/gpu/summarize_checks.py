"""The summary of bench/gpu/run_device_checks.sh: summary.json and the short table printed last.

What it is for
      python3 bench/gpu/summarize_checks.py --work DIR --out summary.json [--quiet] [--cpu-only]
          [--budget S] [--elapsed S]
  reads what the check's steps left in its work directory (steps/<step>.json with each step's
  status, tests/*.xml from gtest, greedy/greedy.json, logits/compare.json, speed/*.json, env.log,
  bundle_manifest.json, spec/spec.jsonl) and writes one summary: pass/fail per step and the key
  figures (test counts, greedy agreement, logit distances, decode tokens/s and bandwidth fractions,
  our speed over transformers', speculative decoding's speedups). Called after every step (so a check cut short still leaves a summary) and
  once at the end, whose exit status is the check's: 1 when a step failed or a required step
  never ran.
      python3 bench/gpu/summarize_checks.py --tests-only DIR [--cpu-only]
  counts the gtest XML files in DIR and exits 1 when a test failed or (on a GPU run) when no test
  ran at all — every one skipping means the GPU was not seen.

What it must not do
  Run anything, or turn a missing result into a pass.
"""

import argparse
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_last_json_line(path):
    """The last line of a file that parses as a JSON object (the benches print one)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            j = json.loads(line)
            if isinstance(j, dict):
                return j
        except ValueError:
            continue
    return None


def test_counts(directory):
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.xml"))):
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            root = ET.parse(path).getroot()
        except (ET.ParseError, OSError) as e:
            out[name] = {"error": f"unreadable XML: {e}"}
            continue
        cases = root.findall(".//testcase")
        skipped = sum(1 for c in cases if c.get("result") == "skipped" or c.find("skipped") is not None)
        failed = sum(1 for c in cases if c.find("failure") is not None or c.find("error") is not None)
        failed_names = [f"{c.get('classname')}.{c.get('name')}" for c in cases
                        if c.find("failure") is not None or c.find("error") is not None]
        out[name] = {"tests": len(cases), "passed": len(cases) - skipped - failed, "failed": failed,
                     "skipped": skipped, "failed_tests": failed_names[:20]}
    return out


def tests_verdict(counts, cpu_only):
    total = sum(c.get("tests", 0) for c in counts.values())
    ran = sum(c.get("passed", 0) + c.get("failed", 0) for c in counts.values())
    failed = sum(c.get("failed", 0) for c in counts.values()) + sum(1 for c in counts.values() if "error" in c)
    if not counts:
        return False, "no test results"
    if failed:
        return False, f"{failed} failed"
    if not cpu_only and ran == 0:
        return False, f"all {total} tests skipped: the GPU was not seen"
    return True, f"{ran} ran, {total - ran} skipped"


def tests_only(args):
    counts = test_counts(args.tests_only)
    for name, c in counts.items():
        print(f"{name:28s} {json.dumps(c)}")
    ok, note = tests_verdict(counts, args.cpu_only)
    print(f"tests: {'pass' if ok else 'FAIL'} ({note})")
    return 0 if ok else 1


def env_figures(work):
    text = ""
    try:
        with open(os.path.join(work, "env.log")) as f:
            text = f.read()
    except OSError:
        pass
    def grab(pattern):
        m = re.search(pattern, text, re.M)
        return m.group(1).strip() if m else None
    manifest = load(os.path.join(work, "bundle_manifest.json")) or {}
    return {"gpu": grab(r"^(NVIDIA .*)$"), "nvcc": grab(r"^(Cuda compilation tools.*)$"),
            "torch": grab(r"^torch (.*)$"), "transformers": grab(r"^transformers (.*)$"),
            "tree_commit": grab(r"^tree commit: (.*)$"), "bundle_commit": manifest.get("commit"),
            "bundle_dirty": manifest.get("dirty")}


def greedy_figures(work):
    g = load(os.path.join(work, "greedy", "greedy.json"))
    if not g:
        return None
    table = {}
    for model, methods in g["models"].items():
        for method, e in methods.items():
            if "errors" in e:
                table[f"{model} {method}"] = "error: " + "; ".join(f"{d}: {m[:160]}" for d, m in e["errors"].items())
            else:
                cell = f"{e['agree']}/{e['agree'] + e['disagree']}"
                for key, v in e.items():
                    if key.startswith("vs_plain_on_") and v["disagree"]:
                        cell += f", vs plain on {key[12:]}: {v['agree']}/{v['agree'] + v['disagree']}"
                table[f"{model} {method}"] = cell
    return {"ok": g["ok"], "devices": g["devices"], **g["totals"], "agreement": table}


def logits_figures(work):
    c = load(os.path.join(work, "logits", "compare.json"))
    if not c:
        return None
    out = {"ok": c["ok"], "transformers": c["transformers"], "models": {}}
    for name, e in c["models"].items():
        m = {}
        for key in ("vs_reference", "vs_transformers"):
            if key in e:
                m[key] = {"max_abs_diff": e[key]["max_abs_diff"],
                          "argmax_agree": f"{e[key]['argmax_agree']}/{e[key]['positions']}"}
        for key in ("error", "hf_error"):
            if key in e:
                m[key] = e[key]
        out["models"][name] = m
    return out


def speed_figures(work):
    ours = load_last_json_line(os.path.join(work, "speed", "baton.json"))
    hf = {mode: load(os.path.join(work, "speed", f"hf_{mode}.json")) for mode in ("eager", "compile")}
    if not ours and not any(hf.values()):
        return None
    def per_batch(r):
        if not r or "decode" not in r:
            return None
        return {str(d["batch"]): {"tokens_per_s": round(d["tokens_per_s"], 1), "step_ms": round(d["step_ms_median"], 3),
                                  "fraction_of_copy_bandwidth": round(d["fraction_of_copy_bandwidth"], 3),
                                  "finite_logits": d.get("finite_logits")} for d in r["decode"]}
    eager = per_batch({"decode": ours["decode_eager"]}) if ours and "decode_eager" in ours else None
    out = {"baton": per_batch(ours), "baton_without_graphs": eager, "copy_bandwidth_bytes_per_s": (ours or {}).get("copy", {}).get("read_write_bytes_per_s"),
           "plumbing_test": (ours or {}).get("plumbing_test")}
    if ours and "error" in ours:
        out["baton_error"] = ours["error"]
    peak = (load_last_json_line(os.path.join(work, "speed", "tensor_core_peak.json")) or {}).get("bf16_matmul_flops_per_s")
    out["bf16_matmul_flops_per_s"] = peak
    # Prefill's arithmetic rate, batch invariant (baton.json) and not (baton_nbi.json), against the
    # measured tensor-core rate.
    nbi = load_last_json_line(os.path.join(work, "speed", "baton_nbi.json"))
    for key, r in (("baton_prefill", ours), ("baton_prefill_no_batch_invariant", nbi)):
        if r and "prefill" in r:
            p = r["prefill"]
            out[key] = {"tokens": p["tokens"], "tokens_per_s": round(p["tokens_per_s"], 1),
                        "tflops": round(p.get("flops_per_s", 0) / 1e12, 2),
                        "fraction_of_tensor_core_peak": round(p["flops_per_s"] / peak, 3) if peak and "flops_per_s" in p else None,
                        "finite_logits": p.get("finite_logits")}
    out["baton_no_batch_invariant"] = per_batch(nbi)
    for mode, r in hf.items():
        if r is None:
            continue
        out[f"transformers_{mode}"] = per_batch(r) if "error" not in r else {"error": r["error"][:300]}
    ratios = {}
    if out["baton"]:
        for mode in ("eager", "compile"):
            theirs = out.get(f"transformers_{mode}")
            if theirs and "error" not in theirs:
                ratios[mode] = {b: round(v["tokens_per_s"] / theirs[b]["tokens_per_s"], 3)
                                for b, v in out["baton"].items() if b in theirs}
    out["ours_over_transformers"] = ratios
    # A long-context decode batch with an F32 and a BF16 KV cache (the cache's bytes dominate).
    kv = {dt: load_last_json_line(os.path.join(work, "speed", f"kv_{dt}.json")) for dt in ("float32", "bfloat16")}
    kv = {dt: r["decode"][0] for dt, r in kv.items() if r and r.get("decode")}
    if len(kv) == 2:
        f32, bf16 = kv["float32"], kv["bfloat16"]
        out["kv_cache_dtype"] = {"batch": f32["batch"], "context": f32.get("context"),
                                 "step_ms_float32": round(f32["step_ms_median"], 3),
                                 "step_ms_bfloat16": round(bf16["step_ms_median"], 3),
                                 "bfloat16_over_float32": round(bf16["step_ms_median"] / f32["step_ms_median"], 3)}
    return out


def spec_figures(work):
    """spec/spec.jsonl (bench/spec_bench): per method and case, the TPOT speedup over plain decoding,
    the mean acceptance length and the requests whose tokens differ."""
    path = os.path.join(work, "spec", "spec.jsonl")
    if not os.path.exists(path):
        return None
    out = {}
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            out[f'{r["speculative_config"]["method"]} {r["case"]}'] = {
                "speedup": round(r["speedup"], 3), "mean_acceptance_length": round(r["mean_acceptance_length"], 3),
                "token_mismatches": r["token_mismatches"]}
    return out or None


def summarize(args):
    steps = {}
    order = ["bundle", "env", "tests", "greedy", "logits", "speed_baton", "spec", "speed_hf", "speed_hf_compile"]
    found = [load(p) for p in glob.glob(os.path.join(args.work, "steps", "*.json"))]
    for s in sorted((s for s in found if s), key=lambda s: (order.index(s["step"]) if s["step"] in order else 99, s["step"])):
        steps[s["step"]] = {k: s[k] for k in ("status", "seconds", "note")}
    summary = {"cpu_only": args.cpu_only, "budget_s": args.budget, "elapsed_s": args.elapsed, "steps": steps,
               "env": env_figures(args.work)}
    counts = test_counts(os.path.join(args.work, "tests"))
    if counts:
        ok, note = tests_verdict(counts, args.cpu_only)
        summary["tests"] = {"ok": ok, "note": note, "executables": counts}
    for key, fn in (("greedy", greedy_figures), ("logits", logits_figures), ("speed", speed_figures),
                    ("spec", spec_figures)):
        v = fn(args.work)
        if v is not None:
            summary[key] = v
    # A non-finite logit in the speed run is a failure of that step, whatever its exit status.
    speed = summary.get("speed") or {}
    if speed.get("baton") and any(v.get("finite_logits") is False for v in speed["baton"].values()):
        if "speed_baton" in steps and steps["speed_baton"]["status"] == "pass":
            steps["speed_baton"] = {**steps["speed_baton"], "status": "fail", "note": "non-finite logits"}
    required = ["env", "tests", "greedy", "logits", "speed_baton"] + ([] if args.cpu_only else ["speed_hf"])
    # The gtest verdict stands on its own too (e.g. every test skipped on a GPU run).
    if "tests" in summary and not summary["tests"]["ok"] and steps.get("tests", {}).get("status") == "pass":
        steps["tests"] = {**steps["tests"], "status": "fail", "note": summary["tests"]["note"]}
    failed = [n for n, s in steps.items() if s["status"] == "fail"]
    unfinished = [n for n in required if n not in steps or (steps[n]["status"] == "skipped"
                                                               and steps[n]["note"] != "--skip")]
    summary["failed_steps"] = failed
    summary["missing_steps"] = unfinished
    summary["ok"] = not failed and not unfinished
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    if not args.quiet:
        print_summary(summary)
    return 0 if summary["ok"] else 1


def print_summary(s):
    print("=" * 100)
    env = s.get("env") or {}
    print(f"GPU: {env.get('gpu')} | {env.get('nvcc')} | torch {env.get('torch')} | transformers {env.get('transformers')}")
    print(f"bundle commit {env.get('bundle_commit')}{' (dirty)' if env.get('bundle_dirty') else ''}, "
          f"tree {env.get('tree_commit')}")
    notes = {}
    if "tests" in s:
        notes["tests"] = s["tests"]["note"] + " — " + ", ".join(
            f"{n} {c.get('passed', 0)}/{c.get('tests', 0)}" for n, c in s["tests"]["executables"].items())
    if "greedy" in s:
        g = s["greedy"]
        bad = [f"{k}: {v}" for k, v in g["agreement"].items() if "error" in v or v.split("/")[0] != v.split("/")[1].split(",")[0]]
        notes["greedy"] = (f"{g['agreeing_comparisons']}/{g['comparisons']} model x method comparisons agree "
                           f"({g['devices']['a']} vs {g['devices']['b']})" + ("; " + "; ".join(bad[:4]) if bad else ""))
    if "logits" in s:
        worst = {}
        for name, m in s["logits"]["models"].items():
            for key in ("vs_reference", "vs_transformers"):
                if key in m and m[key]["max_abs_diff"] > worst.get(key, (-1, ""))[0]:
                    worst[key] = (m[key]["max_abs_diff"], name)
        notes["logits"] = ", ".join(f"max |ours - {k[3:]}| {v[0]:.2e} ({v[1]})" for k, v in worst.items())
    sp = s.get("speed") or {}
    if sp.get("baton"):
        notes["speed_baton"] = ("(plumbing test, tiny model) " if sp.get("plumbing_test") else "") + ", ".join(f"b{b}: {v['tokens_per_s']} tok/s, {v['step_ms']} ms/step, "
                                         f"{v['fraction_of_copy_bandwidth']} of copy bw" for b, v in sp["baton"].items())
        if sp.get("baton_without_graphs"):
            notes["speed_baton"] += "; without graphs: " + ", ".join(
                f"b{b}: {v['step_ms']} ms/step, {v['fraction_of_copy_bandwidth']} of copy bw"
                for b, v in sp["baton_without_graphs"].items())
    elif sp.get("baton_error"):
        notes["speed_baton"] = sp["baton_error"][:200]
    for key, label in (("baton_prefill", "prefill"), ("baton_prefill_no_batch_invariant", "prefill --no-batch-invariant")):
        if sp.get(key):
            p = sp[key]
            notes["speed_baton"] = notes.get("speed_baton", "") + (
                f"; {label} {p['tokens']} tok: {p['tflops']} TFLOP/s = {p['fraction_of_tensor_core_peak']} of tensor-core peak")
    if sp.get("baton_no_batch_invariant"):
        notes["speed_baton"] = notes.get("speed_baton", "") + "; --no-batch-invariant: " + ", ".join(
            f"b{b}: {v['tokens_per_s']} tok/s, {v['fraction_of_copy_bandwidth']} of copy bw"
            for b, v in sp["baton_no_batch_invariant"].items())
    if sp.get("kv_cache_dtype"):
        k = sp["kv_cache_dtype"]
        notes["speed_baton"] = notes.get("speed_baton", "") + (
            f"; b{k['batch']} at context {k['context']}: {k['step_ms_float32']} ms/step with an F32 KV cache, "
            f"{k['step_ms_bfloat16']} with BF16 ({k['bfloat16_over_float32']}x)")
    hf_bits = []
    for mode in ("eager", "compile"):
        r = sp.get(f"transformers_{mode}")
        if r and "error" not in r:
            hf_bits.append(f"{mode}: " + ", ".join(f"b{b} {v['tokens_per_s']} tok/s" for b, v in r.items()))
        elif r:
            hf_bits.append(f"{mode}: error {r['error'][:120]}")
    for mode, ratio in (sp.get("ours_over_transformers") or {}).items():
        hf_bits.append(f"ours/{mode} " + ", ".join(f"b{b} {x}x" for b, x in ratio.items()))
    if hf_bits:
        notes["speed_hf"] = "; ".join(hf_bits)
    if s.get("spec"):
        notes["spec"] = ", ".join(f"{k}: {v['speedup']}x (acceptance {v['mean_acceptance_length']})"
                                  for k, v in s["spec"].items())
    print(f"{'step':18s} {'status':14s} {'s':>5s}  notes")
    for name, st in s["steps"].items():
        note = notes.get(name) or st.get("note") or ""
        if st.get("note") and notes.get(name):
            note = f"[{st['note']}] {note}"
        print(f"{name:18s} {st['status']:14s} {st['seconds']:5d}  {note}")
    if s["missing_steps"]:
        print(f"missing: {', '.join(s['missing_steps'])}")
    print(f"OVERALL: {'PASS' if s['ok'] else 'FAIL'} in {s['elapsed_s']} s"
          f"{' (CPU-only plumbing run)' if s['cpu_only'] else ''}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--tests-only")
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--budget", type=int, default=0)
    ap.add_argument("--elapsed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.tests_only:
        return tests_only(args)
    if not args.work or not args.out:
        ap.error("--work and --out (or --tests-only)")
    return summarize(args)


if __name__ == "__main__":
    sys.exit(main())
