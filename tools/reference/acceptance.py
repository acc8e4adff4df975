"""Greedy acceptance of the family's proposers on the HumanEval prompts, from the float64 references.

What it is for
  Knowing, before (and independently of) the C++ engine, whether the family meets its goal
  (mean acceptance length >= 2.0 for EAGLE-3 and the draft model, k = 4):
      /usr/bin/python3 tools/reference/acceptance.py --family models/baton-tiny-code \
          [--data /work/shared/data/HumanEval.jsonl.gz] [--k 4] [--max-new 128] [--limit N]
  For each prompt (field `prompt`, encoded with BOS by the family's tokenizer), the target's greedy
  continuation g (max-new tokens, or up to and including EOS) is the output. Speculative steps are
  then replayed: with seq = prompt + g[:m], each method proposes k tokens; accepted = the longest
  prefix equal to g[m:m+k]; the step emits accepted + 1 tokens (the target's token after them).
  Mean acceptance length = 1 + accepted / drafts (REFERENCE §5), also per-position rates.
  Proposers: eagle3 / mtp (spec_heads_ref.py), draft (the draft model's greedy tokens).
  Prints one JSON object (per method: drafts, accepted, mean_acceptance_length, per_position).

What it must not do
  Use the training code (tools/train/ except its stdlib tokenizer, which check_tokenizer.py proves
  equal to HF's and Baton's); let a proposer see the target's future tokens.
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import spec_heads_ref as sref  # noqa: E402
import tokenizer_bpe  # noqa: E402  (stdlib only)
import transformer_ref as ref  # noqa: E402


class CachedDecoder:
    """Incremental float64 decoding with a KV cache, for plain Llama models of transformer_ref
    (no biases, no q/k norm, no sliding window). Same math as ref.forward (self_check verifies)."""

    def __init__(self, m):
        if m.qkv_bias or m.o_bias or m.qk_norm or any(w is not None for w in m.windows):
            raise ValueError("CachedDecoder supports plain Llama models only")
        self.m, self.tokens = m, []
        self.k = [torch.zeros(0, m.n_kv_heads, m.head_dim, dtype=torch.float64) for _ in range(m.n_layers)]
        self.v = [t.clone() for t in self.k]

    def truncate(self, n):
        self.tokens = self.tokens[:n]
        self.k = [t[:n] for t in self.k]
        self.v = [t[:n] for t in self.v]

    def append(self, tokens):
        """Runs `tokens` after the cached ones; returns their logits [t, V]."""
        m, start, t = self.m, len(self.tokens), len(tokens)
        pos = torch.arange(start, start + t)
        x = m.weights["model.embed_tokens.weight"][torch.as_tensor(tokens)]
        allowed = torch.arange(start + t)[None, :] <= pos[:, None]
        for i in range(m.n_layers):
            p = f"model.layers.{i}."
            h = ref.rms_norm(x, m.weights[p + "input_layernorm.weight"], m.eps)
            q = ref.linear(m, h, p + "self_attn.q_proj").view(t, m.n_heads, m.head_dim)
            k = ref.linear(m, h, p + "self_attn.k_proj").view(t, m.n_kv_heads, m.head_dim)
            v = ref.linear(m, h, p + "self_attn.v_proj").view(t, m.n_kv_heads, m.head_dim)
            q, k = ref.apply_rope(q, pos, m.inv_freq), ref.apply_rope(k, pos, m.inv_freq)
            self.k[i], self.v[i] = torch.cat([self.k[i], k]), torch.cat([self.v[i], v])
            g = m.n_heads // m.n_kv_heads
            kk, vv = self.k[i].repeat_interleave(g, dim=1), self.v[i].repeat_interleave(g, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q, kk) / math.sqrt(m.head_dim)
            probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            x = x + ref.linear(m, torch.einsum("hqk,khd->qhd", probs, vv).reshape(t, -1), p + "self_attn.o_proj")
            x = x + ref.mlp(m, i, ref.rms_norm(x, m.weights[p + "post_attention_layernorm.weight"], m.eps))
        self.tokens += list(tokens)
        return ref.rms_norm(x, m.weights["model.norm.weight"], m.eps) @ m.weights["lm_head.weight"].T

    def sync(self, seq):
        """Makes the cache hold seq (reusing the common prefix); returns the logits at seq[-1]."""
        common = 0
        for a, b in zip(self.tokens, seq[:-1]):
            if a != b:
                break
            common += 1
        self.truncate(common)
        return self.append(seq[common:])[-1]


def self_check(m, seq):
    full = ref.forward(m, seq)
    dec = CachedDecoder(m)
    part = torch.cat([dec.append(seq[:3]), dec.append(seq[3:5]), dec.append(seq[5:])])
    err = float((part - full).abs().max())
    if err > 1e-9:
        raise AssertionError(f"CachedDecoder differs from transformer_ref.forward by {err}")


def greedy_continuation(m, prompt, max_new, eos):
    dec, out = CachedDecoder(m), []
    logits = dec.append(prompt)[-1]
    for _ in range(max_new):
        token = int(logits.argmax())
        out.append(token)
        if token in eos:
            break
        logits = dec.append([token])[-1]
    return out


def draft_model_proposer(draft):
    dec = CachedDecoder(draft)

    def propose(seq, k, states):
        logits, drafts = dec.sync(seq), []
        for j in range(k):
            drafts.append(int(logits.argmax()))
            if j + 1 < k:
                logits = dec.append([drafts[-1]])[-1]
        return drafts
    return propose


def replay(prompt, g, k, propose, states, stats):
    """Replays speculative steps over the known greedy output g; updates stats in place."""
    m = 0
    while m < len(g):
        drafts = propose(prompt + g[:m], k, states)
        accepted = 0
        while accepted < k and m + accepted < len(g) and drafts[accepted] == g[m + accepted]:
            accepted += 1
        stats["drafts"] += 1
        stats["accepted"] += accepted
        for i in range(accepted):
            stats["per_position"][i] += 1
        m += accepted + 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True, help="dir with target/, draft/, eagle3/, mtp/")
    ap.add_argument("--data", default="/work/shared/data/HumanEval.jsonl.gz")
    ap.add_argument("--methods", default="eagle3,mtp,draft")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0, help="first N prompts only (0 = all)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    f = args.family
    target = ref.load_model(os.path.join(f, "target"))
    tok = tokenizer_bpe.load(os.path.join(f, "target"))
    methods = args.methods.split(",")
    proposers = {}
    if "eagle3" in methods:
        head = sref.load_eagle3(os.path.join(f, "eagle3"))
        proposers["eagle3"] = lambda seq, k, st: sref.eagle3_draft(target, head, seq, k, st)
    if "mtp" in methods:
        mtp = sref.load_mtp(os.path.join(f, "mtp"))
        proposers["mtp"] = lambda seq, k, st: sref.mtp_draft(target, mtp, seq, k, st)
    if "draft" in methods:
        proposers["draft"] = draft_model_proposer(ref.load_model(os.path.join(f, "draft")))
    opener = gzip.open if args.data.endswith(".gz") else open
    with opener(args.data, "rt") as fh:
        prompts = [json.loads(line)["prompt"] for line in fh if line.strip()]
    if args.limit:
        prompts = prompts[:args.limit]
    stats = {name: {"drafts": 0, "accepted": 0, "per_position": [0] * args.k} for name in proposers}
    start, generated = time.time(), 0
    for i, text in enumerate(prompts):
        prompt = tok.encode(text, add_bos=True)
        if i == 0:
            self_check(target, prompt[:12])
        g = greedy_continuation(target, prompt, args.max_new, set(target.eos_ids))
        generated += len(g)
        states = sref.target_states(target, prompt + g)
        for name, propose in proposers.items():
            replay(prompt, g, args.k, propose, states, stats[name])
        if (i + 1) % 10 == 0:
            done = {n: round(1 + s["accepted"] / max(1, s["drafts"]), 3) for n, s in stats.items()}
            print(f"{i + 1}/{len(prompts)} prompts, {time.time() - start:.0f} s: {done}", file=sys.stderr, flush=True)
    result = {"prompts": len(prompts), "k": args.k, "max_new": args.max_new, "generated_tokens": generated,
              "seconds": round(time.time() - start, 1), "methods": {}}
    for name, s in stats.items():
        result["methods"][name] = {
            "drafts": s["drafts"], "accepted": s["accepted"],
            "mean_acceptance_length": round(1 + s["accepted"] / max(1, s["drafts"]), 4),
            "acceptance_rate": round(s["accepted"] / max(1, s["drafts"] * args.k), 4),
            "per_position": [round(a / max(1, s["drafts"]), 4) for a in s["per_position"]]}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
