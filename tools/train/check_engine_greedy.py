"""Check that Baton's engine and the training framework produce the same greedy tokens.

What it is for
  "Greedy output of our engine equals the training framework's own greedy output for the same
  checkpoint on 10 prompts" (ctest `family_*_greedy`, tests/models/CMakeLists.txt):
      /usr/bin/python3 tools/train/check_engine_greedy.py [--model models/baton-tiny-code/target]
          [--baton build/release/cli/baton] [--max-tokens 64] [--speculative]
  For each prompt of PROMPTS: the engine runs `baton generate --prompt TEXT --json` (its own
  tokenizer, BOS added, greedy, stops at EOS); the training framework is tools/train/llama.py's
  LlamaForCausalLM loaded from the same directory (BF16 weights upcast to float32, eval mode),
  decoding greedily from the prompt encoded by tokenizer_bpe.py (equal to HF's and Baton's,
  check_tokenizer.py). Prints per prompt whether the token ids match, the first difference and the
  reference's top-1/top-2 logit margin there (a tiny margin means a numerical near-tie, not a bug),
  and the text; exits 1 on any mismatch. Also works for the draft model directory.
  With --speculative (target only), the engine also runs every proposer of the family (ngram,
  suffix, draft_model, eagle3, mtp, medusa, and dflash where the family has one; k = 4, greedy) and
  each must give the same ids too: speculative decoding is lossless on the trained models, not only
  on random fixtures.

What it must not do
  Compare anything but token ids (text is printed for people); retry or skip a prompt.
"""

import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_bpe  # noqa: E402
from llama import load_hf_dir  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
PROMPTS = [
    "def fibonacci(n):",
    "import os\n",
    "class Stack:\n    def __init__(self):",
    'def is_prime(n):\n    """Return True if n is a prime number."""\n',
    "for i in range(10):",
    "import sys\n\n\ndef main(argv):",
    "def read_file(path):\n    with open(path) as f:",
    "class Point:\n",
    "# Sort a list of numbers\ndef sort_numbers(xs):",
    "    def __repr__(self):",
]


def engine_greedy(baton, model_dir, prompt, max_tokens, threads, spec=None):
    cmd = [baton, "generate", "--model", model_dir, "--prompt", prompt, "--max-tokens", str(max_tokens), "--json",
           "--threads", str(threads)]
    if spec:
        cmd += ["--speculative-config", json.dumps(spec)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def family_specs(model_dir, k=4):
    """The speculative configs of the family next to `model_dir` (its target)."""
    family = os.path.dirname(os.path.abspath(model_dir))
    specs = {"ngram": {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
             "suffix": {"method": "suffix", "num_speculative_tokens": k}}
    for method, sub in (("draft_model", "draft"), ("eagle3", "eagle3"), ("mtp", "mtp"), ("medusa", "medusa"),
                        ("dflash", "dflash")):
        specs[method] = {"method": method, "num_speculative_tokens": k, "model": os.path.join(family, sub)}
    return specs


def margin_at(model, seq):
    with torch.no_grad():
        top2 = torch.topk(model(torch.tensor([seq]))[0, -1], 2).values
    return float(top2[0] - top2[1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models", "baton-tiny-code", "target"))
    ap.add_argument("--baton", default=os.path.join(REPO, "build", "release", "cli", "baton"))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--speculative", action="store_true", help="also every proposer of the family (k = 4)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_hf_dir(args.model)
    tok = tokenizer_bpe.load(args.model)
    eos = {model.config.eos_token_id}
    results, ok = [], True
    for prompt in PROMPTS:
        ids = tok.encode(prompt, add_bos=True)
        mine = model.greedy(ids, args.max_tokens, eos)
        runs = {"plain": None}
        if args.speculative:
            runs.update(family_specs(args.model))
        for name, spec in runs.items():
            eng = engine_greedy(args.baton, args.model, prompt, args.max_tokens, args.threads, spec)
            theirs = eng["token_ids"]
            same = theirs == mine
            rec = {"prompt": prompt, "engine": name, "match": same,
                   "prompt_tokens": [len(ids), eng.get("prompt_tokens")], "tokens": len(mine)}
            if spec:
                rec["mean_acceptance_length"] = eng["spec"]["mean_acceptance_length"]
            else:
                rec["text"] = eng.get("text")
            if not same:
                ok = False
                first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
                rec.update({"first_difference": first, "framework": mine[first:first + 5],
                            "engine_ids": theirs[first:first + 5],
                            "framework_margin_there": round(margin_at(model, ids + mine[:first]), 5)})
            results.append(rec)
            print(json.dumps(rec, ensure_ascii=False), flush=True)
    print(json.dumps({"prompts": len(PROMPTS), "runs": len(results), "matching": sum(r["match"] for r in results),
                      "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
