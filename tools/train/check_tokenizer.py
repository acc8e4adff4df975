"""Check that three encoders agree on the family's tokenizer: ours (tokenizer_bpe.py, which made
the training data), Hugging Face `tokenizers` (npm, via hf_encode.js) and Baton's C++ tokenizer.

What it is for
      /usr/bin/python3 tools/train/check_tokenizer.py --tokenizer models/baton-tiny-code/target \
          --corpus build/family/corpus [--baton build/release/cli/baton] [--max-lines N]
  Texts: every non-empty line of the validation split (C++, HF and ours), plus every whole
  validation file (HF and ours: `baton tokenize` works per line). Prints a JSON summary and exits
  1 on any difference, naming the first differing text.

What it must not do
  Normalise or post-process any encoder's answer; skip a text silently (a missing tool is an error
  unless --skip-cpp / --skip-hf says so).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_bpe  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def hf_encode(tokenizer_json, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
        path = f.name
    try:
        out = subprocess.run(["node", os.path.join(HERE, "hf_encode.js"), tokenizer_json, path],
                             capture_output=True, text=True, check=True)
    finally:
        os.unlink(path)
    return json.loads(out.stdout)


def cpp_encode(baton, model_dir, lines):
    out = subprocess.run([baton, "tokenize", "--model", model_dir], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def first_difference(name_a, a, name_b, b, texts):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return {"pair": f"{name_a} vs {name_b}", "index": i, "text": texts[i][:200], name_a: x[:40], name_b: y[:40]}
    if len(a) != len(b):
        return {"pair": f"{name_a} vs {name_b}", "lengths": [len(a), len(b)]}
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="dir with tokenizer.json")
    ap.add_argument("--corpus", required=True, help="dir with valid.txt (tools/train/corpus.py)")
    ap.add_argument("--baton", default=os.path.join(REPO, "build", "release", "cli", "baton"))
    ap.add_argument("--max-lines", type=int, default=0, help="0 = all")
    ap.add_argument("--skip-cpp", action="store_true")
    ap.add_argument("--skip-hf", action="store_true")
    args = ap.parse_args(argv)
    with open(os.path.join(args.corpus, "valid.txt"), encoding="utf-8", newline="") as f:
        valid = f.read()
    # baton tokenize reads lines split on "\n"; keep "\r"-free lines so both see the same text.
    lines = [ln for ln in valid.split("\n") if ln.strip() and "\r" not in ln]
    if args.max_lines:
        lines = lines[:args.max_lines]
    docs = [d for d in valid.split(tokenizer_bpe.EOT) if d]
    ours = tokenizer_bpe.load(args.tokenizer)
    mine_lines = [ours.encode(t) for t in lines]
    mine_docs = [ours.encode(t) for t in docs]
    summary = {"lines": len(lines), "documents": len(docs), "tokens_in_lines": sum(map(len, mine_lines)),
               "tokens_in_documents": sum(map(len, mine_docs)), "differences": []}
    if not args.skip_hf:
        hf = hf_encode(os.path.join(args.tokenizer, "tokenizer.json"), lines + docs)
        hf_lines, hf_docs = hf["plain"][:len(lines)], hf["plain"][len(lines):]
        for d in (first_difference("ours", mine_lines, "hf", hf_lines, lines),
                  first_difference("ours", mine_docs, "hf", hf_docs, docs)):
            if d:
                summary["differences"].append(d)
        bos_ok = all(s == [0] + p for s, p in zip(hf["special"], hf["plain"]))
        summary["hf_adds_bos_0"] = bos_ok
        if not bos_ok:
            summary["differences"].append({"pair": "hf special tokens", "what": "encode(add_special) != [0] + plain"})
    if not args.skip_cpp:
        cpp = cpp_encode(args.baton, args.tokenizer, lines)
        d = first_difference("ours", mine_lines, "cpp", cpp, lines)
        if d:
            summary["differences"].append(d)
    summary["ok"] = not summary["differences"]
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
