"""Speculative acceptance on the family's validation chats, as Baton serves them.

What it is for
      /usr/bin/python3 tools/train/chat_acceptance.py --family models/baton-tiny-code \\
          --baton build/release/cli/baton [--work build/family] [--max-tokens 256] [--out FILE.json]
  Renders the user turn of every validation pair (chat_data.Pairs over WORK, the corpus and
  tokenizer stages' output) with the chat template and add_generation_prompt, and runs them all
  through one `baton generate --prompts-file` (greedy, 1 thread, stopping at <|endoftext|> as a chat
  does, at most --max-tokens each): once plain, then once per proposer of the family (ngram,
  suffix, draft_model, eagle3, mtp; k = 4). Reports, per method, mean acceptance length
  (1 + accepted / drafts over all requests), acceptance rate, how many chats stopped, and how many
  requests' tokens differ from the plain run's (must be 0: speculation is lossless). The prompt
  text leaves out the template's leading <|endoftext|>: `--prompts-file` prompts get BOS from the
  tokenizer, so the ids are exactly those of the rendered chat. model_card.py reads --out.

What it must not do
  Train or write anything but --out and a temporary prompts file; use pairs from the train split.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import chat_data  # noqa: E402

K = 4


def specs(family):
    return {"plain": None,
            "ngram": {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
            "suffix": {"method": "suffix", "num_speculative_tokens": K},
            "draft_model": {"method": "draft_model", "num_speculative_tokens": K, "model": f"{family}/draft"},
            "eagle3": {"method": "eagle3", "num_speculative_tokens": K, "model": f"{family}/eagle3"},
            "mtp": {"method": "mtp", "num_speculative_tokens": K, "model": f"{family}/mtp"}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=os.path.join(REPO, "models", "baton-tiny-code"))
    ap.add_argument("--baton", default=os.path.join(REPO, "build", "release", "cli", "baton"))
    ap.add_argument("--work", default=os.path.join(REPO, "build", "family"))
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    family = os.path.abspath(a.family)
    pairs = chat_data.Pairs(a.work, "valid", 513)
    result = {"family": a.family, "prompts": len(pairs), "max_tokens": a.max_tokens, "num_speculative_tokens": K,
              "threads": 1, "methods": {}}
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(len(pairs)):
            text = chat_data.render([{"role": "user", "content": pairs.items[i]["user"]}], add_generation_prompt=True)
            f.write(json.dumps({"prompt": text[len(chat_data.EOT):], "max_tokens": a.max_tokens}) + "\n")
    plain, bad = None, 0
    try:
        for name, spec in specs(family).items():
            cmd = [a.baton, "generate", "--model", f"{family}/target", "--prompts-file", f.name, "--threads", "1",
                   "--json"]
            if spec:
                cmd += ["--speculative-config", json.dumps(spec)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows = [json.loads(line) for line in out.splitlines() if line.strip()]
            rows = sorted((r for r in rows if "index" in r), key=lambda r: r["index"])
            tokens = [r["token_ids"] for r in rows]
            plain = plain or tokens
            drafts = sum(r["spec"]["num_drafts"] for r in rows) if spec else 0
            drafted = sum(r["spec"]["num_draft_tokens"] for r in rows) if spec else 0
            accepted = sum(r["spec"]["num_accepted_tokens"] for r in rows) if spec else 0
            m = {"drafts": drafts, "draft_tokens": drafted, "accepted": accepted,
                 "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts else None,
                 "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
                 "generated_tokens": sum(len(t) for t in tokens),
                 "stopped": sum(r["finish_reason"] == "stop" for r in rows),
                 "greedy_mismatches": sum(x != y for x, y in zip(tokens, plain))}
            bad += m["greedy_mismatches"]
            result["methods"][name] = m
            print(f"{name:12s} " + ", ".join(f"{k} {v}" for k, v in m.items()), flush=True)
    finally:
        os.unlink(f.name)
    if a.out:
        with open(a.out, "w") as g:
            json.dump(result, g, indent=1)
            g.write("\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
