"""Our logits (bench/gpu/dump_logits .npy files) against the fixture's float64 reference and against
Hugging Face transformers (float32, eager attention) on the same prompt.

What it is for
  Step "logits" of bench/gpu/run_device_checks.sh:
      python3 bench/gpu/compare_hf_logits.py --logits-dir DIR [--prompt-tokens 1,2,3] [--no-hf]
          [--hf-device cpu] [--ref-tol 1e-4] [--hf-tol 1e-3] --out FILE.json MODEL_DIR...
  For each MODEL_DIR, DIR/<basename>.npy holds our [positions, vocab] float32 logits of its prompt:
  reference.json's prompt_token_ids (tools/fixtures), or --prompt-tokens for a directory without
  one (the family target). Reports per model:
    * vs_reference: max |ours - reference| over all positions and the vocabulary, and how many
      positions have the same argmax (reference.json's float64 logits, tools/reference);
    * vs_transformers: the same against AutoModelForCausalLM.from_pretrained(MODEL_DIR,
      float32, attn_implementation="eager") run on --hf-device (default cpu: plain IEEE float32,
      no TF32 question), and transformers' own distance to the reference, which bounds what we
      can expect. A directory transformers cannot load is reported (`hf_error`), not failed:
      the check is for the architectures it knows.
  A model fails when a max abs diff exceeds its tolerance (reference: --ref-tol, the bound
  tests/engine/model/transformer_test.cc uses; transformers: --hf-tol, looser because its float32
  differs from float64 too). Argmax counts are for reading: a position whose top two logits are
  closer than the error may legitimately flip. Prints a table, writes --out, exits 1 on failure.
  Without transformers (or with --no-hf) only the reference comparison runs; --require-hf (the
  GPU run) makes a missing transformers a failure.

What it must not do
  Run our engine (dump_logits did), download anything (from_pretrained reads the local
  directory only: HF_HUB_OFFLINE is set), or compare in lower than float64.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402


def load_hf(model_dir, device):
    import torch
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                                     local_files_only=True)
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                     attn_implementation="eager", local_files_only=True)
    return model.to(device).eval()


def hf_logits(model_dir, prompt, device):
    import torch
    model = load_hf(model_dir, device)
    with torch.no_grad():
        out = model(torch.tensor([prompt], device=device), use_cache=False).logits[0]
    return out.double().cpu().numpy()


def distance(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    am, bm = a.argmax(-1), b.argmax(-1)
    flips = [int(p) for p in np.nonzero(am != bm)[0]]
    top2 = np.sort(b, axis=-1)[:, -2:]
    return {"max_abs_diff": float(np.abs(a - b).max()), "argmax_agree": int((am == bm).sum()),
            "positions": int(a.shape[0]),
            "argmax_flips": [{"position": p, "margin_there": float(top2[p, 1] - top2[p, 0])} for p in flips]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logits-dir", required=True)
    ap.add_argument("--prompt-tokens", help="comma-separated ids for directories without reference.json")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers")
    ap.add_argument("--require-hf", action="store_true", help="fail when transformers cannot be imported")
    ap.add_argument("--hf-device", default="cpu")
    ap.add_argument("--ref-tol", type=float, default=1e-4)
    ap.add_argument("--hf-tol", type=float, default=1e-3)
    ap.add_argument("--out", required=True)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args(argv)

    use_hf = not args.no_hf
    hf_version = None
    report_error = None
    if use_hf:
        try:
            import torch
            import transformers
            hf_version = transformers.__version__
            torch.set_num_threads(os.cpu_count() or 1)
            if hasattr(torch.backends, "cuda"):
                torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        except ImportError as e:
            print(f"compare_hf_logits: transformers unavailable ({e}); reference comparison only", file=sys.stderr)
            use_hf = False
            if args.require_hf:
                report_error = f"transformers unavailable: {e}"

    report = {"transformers": hf_version, "ref_tol": args.ref_tol, "hf_tol": args.hf_tol, "models": {}}
    ok = report_error is None
    if report_error:
        report["error"] = report_error
    for d in args.models:
        name = os.path.basename(os.path.normpath(d))
        entry = {"model": d}
        report["models"][name] = entry
        npy = os.path.join(args.logits_dir, name + ".npy")
        if not os.path.exists(npy):
            entry["error"] = f"{npy} missing (dump_logits failed?)"
            ok = False
            continue
        ours = np.load(npy)
        ref_path = os.path.join(d, "reference.json")
        ref = None
        if os.path.exists(ref_path):
            with open(ref_path) as f:
                ref = json.load(f)
            prompt = ref["prompt_token_ids"]
            entry["vs_reference"] = distance(ours, ref["logits"])
            entry["vs_reference"]["ok"] = entry["vs_reference"]["max_abs_diff"] <= args.ref_tol
            ok &= entry["vs_reference"]["ok"]
        elif args.prompt_tokens:
            prompt = [int(x) for x in args.prompt_tokens.split(",")]
        else:
            entry["error"] = "no reference.json and no --prompt-tokens"
            ok = False
            continue
        if ours.shape[0] != len(prompt):
            entry["error"] = f"{npy} has {ours.shape[0]} positions, the prompt {len(prompt)}"
            ok = False
            continue
        if use_hf:
            try:
                theirs = hf_logits(d, prompt, args.hf_device)
            except Exception as e:  # noqa: BLE001 — any load/forward failure is reported, not fatal
                entry["hf_error"] = f"{type(e).__name__}: {str(e)[:400]}"
                continue
            entry["vs_transformers"] = distance(ours, theirs)
            entry["vs_transformers"]["ok"] = entry["vs_transformers"]["max_abs_diff"] <= args.hf_tol
            ok &= entry["vs_transformers"]["ok"]
            if ref is not None:
                entry["transformers_vs_reference"] = {"max_abs_diff": distance(theirs, ref["logits"])["max_abs_diff"]}
    report["ok"] = ok
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)

    print(f"{'model':24s} {'vs reference':>22s} {'vs transformers':>22s} {'hf vs ref':>10s}")
    for name, e in report["models"].items():
        def cell(key):
            x = e.get(key)
            if not x:
                return "-"
            return f"{x['max_abs_diff']:.2e} {x['argmax_agree']}/{x['positions']}{'' if x['ok'] else ' FAIL'}"
        hv = e.get("transformers_vs_reference", {}).get("max_abs_diff")
        print(f"{name:24s} {cell('vs_reference'):>22s} {cell('vs_transformers'):>22s} "
              f"{'-' if hv is None else f'{hv:.1e}':>10s}"
              f"{'  ' + e['error'] if 'error' in e else ''}{'  hf: ' + e['hf_error'] if 'hf_error' in e else ''}")
    print(json.dumps({"logits_ok": ok, "transformers": hf_version}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
